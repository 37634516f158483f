package machinespirit

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/taskhost/taskhost/sdk"
)

// CheckpointSchema is the schema of every checkpoint this executor writes
// and the only one it accepts. The payload is the JSON snapshot the worker
// produces (see prolog/runtime.pl):
//
//	{"schema": "machinespirit.graph/1", "graph": ID, "graph_hash": SHA256,
//	 "next": NODE, "state": {...}, "visits": {...}, "executions": N,
//	 "interrupt": null | {"node": ..., "reason": ..., "field": ...}}
//
// No transcript: what a graph needs later is in its state. An interrupt
// that is not null is a pending question: the next step asks it of the
// task's principal (sdk.Host.RequestInput) before the worker runs "next".
const CheckpointSchema = "machinespirit.graph/1"

// PlanSchema is the version of the typed plans the rlm graph's root model
// writes (schema/plan-1.schema.json; interpreted by prolog/rlm_plan.pl).
const PlanSchema = "machinespirit.plan/1"

// DefaultCheckpointMaxBytes is the host's default checkpoint_max_bytes.
const DefaultCheckpointMaxBytes = 256 << 10

// cpHeader is the part of a checkpoint the plugin reads itself. The worker
// checks the whole snapshot against the compiled graph.
type cpHeader struct {
	Schema     string       `json:"schema"`
	Graph      string       `json:"graph"`
	Executions int64        `json:"executions"`
	Interrupt  *cpInterrupt `json:"interrupt"`
}

// cpInterrupt is a pending interrupt: the question the node that paused
// asks (the worker checks the rest).
type cpInterrupt struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// checkpointError is a checkpoint the executor cannot continue from.
type checkpointError struct{ msg string }

func (e *checkpointError) Error() string { return e.msg }

// readCheckpoint checks the host's last checkpoint (nil on a first step)
// and returns its payload (JSON null when there is none) and its header.
func readCheckpoint(cp *sdk.Checkpoint, graph string, maxBytes int) (json.RawMessage, cpHeader, error) {
	var h cpHeader
	if cp == nil {
		return json.RawMessage("null"), h, nil
	}
	if cp.Schema != CheckpointSchema {
		return nil, h, &checkpointError{fmt.Sprintf("checkpoint schema %q, want %q", truncate(cp.Schema, 64), CheckpointSchema)}
	}
	if len(cp.Payload) > maxBytes {
		return nil, h, &checkpointError{fmt.Sprintf("checkpoint of %d bytes exceeds the %d-byte bound", len(cp.Payload), maxBytes)}
	}
	if !isJSONObject(cp.Payload) {
		return nil, h, &checkpointError{"checkpoint payload is not a JSON object"}
	}
	if err := json.Unmarshal(cp.Payload, &h); err != nil {
		return nil, h, &checkpointError{fmt.Sprintf("checkpoint payload: %v", err)}
	}
	if h.Schema != CheckpointSchema {
		return nil, h, &checkpointError{fmt.Sprintf("checkpoint payload schema %q, want %q", truncate(h.Schema, 64), CheckpointSchema)}
	}
	if h.Graph != graph {
		return nil, h, &checkpointError{fmt.Sprintf("checkpoint of graph %q, but the task runs graph %q", truncate(h.Graph, 64), graph)}
	}
	if h.Executions < 0 {
		return nil, h, &checkpointError{"checkpoint records a negative number of executions"}
	}
	if h.Interrupt != nil && h.Interrupt.Reason == "" {
		return nil, h, &checkpointError{"checkpoint has an interrupt without a question"}
	}
	return json.RawMessage(cp.Payload), h, nil
}

// checkpointTooLarge is a snapshot over the bound. It fails the step as
// checkpoint_too_large; it is never truncated.
type checkpointTooLarge struct{ size, max int }

func (e *checkpointTooLarge) Error() string {
	return fmt.Sprintf("checkpoint of %d bytes exceeds the %d-byte bound", e.size, e.max)
}

// makeCheckpoint turns the worker's snapshot into a checkpoint: compact
// JSON, within maxBytes.
func makeCheckpoint(snapshot json.RawMessage, maxBytes int) (*sdk.Checkpoint, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, snapshot); err != nil {
		return nil, &protocolError{msg: "checkpoint is not JSON", err: err}
	}
	if b.Len() > maxBytes {
		return nil, &checkpointTooLarge{size: b.Len(), max: maxBytes}
	}
	return &sdk.Checkpoint{Schema: CheckpointSchema, Payload: b.Bytes()}, nil
}

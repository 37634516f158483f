// Package checklist is a small but complete taskhost executor: it works
// through the items of a checklist, one item per step, and writes each
// item to the task's workspace through the host.
//
// The spec is
//
//	{"goal": "...", "checklist": {"items": ["a", "b", "c"], "pace_ms": 0}}
//
// Step n writes item n to items/<n>.txt with the host's workspace.write
// tool, then checkpoints its position (schema checklist/1, payload
// {"next": n}) and continues; the step that writes the last item completes
// the task with the result {"items": N, "files": ["items/1.txt", ...]}.
// pace_ms, if set, makes each step wait that long before its write (to
// respect a rate limit, say), and the wait ends as soon as the step is
// cancelled.
package checklist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskhost/taskhost/sdk"
)

const (
	// Kind, Version and SchemaV1 identify the executor to the host.
	Kind     = "checklist"
	Version  = "1.0.0"
	SchemaV1 = "checklist/1"

	maxItems     = 1000
	maxItemBytes = 4096
	maxPaceMS    = 60_000
	// maxEcho bounds how much of an item or a tool's output is quoted back
	// in a summary or a failure message.
	maxEcho = 200
)

// Executor is the checklist executor. It keeps nothing between steps: its
// position lives in the checkpoint, so one value serves any number of steps
// and a fresh process can resume any task.
type Executor struct{}

var _ sdk.Executor = Executor{}

// Describe reports the executor's identity. CheckpointSchemas lists every
// schema Step can read, newest first: when a checklist/2 comes, checklist/1
// stays in the list for as long as tasks checkpointed by this release may
// be resumed.
func (Executor) Describe() sdk.Description {
	return sdk.Description{
		Kind:              Kind,
		Version:           Version,
		CheckpointSchemas: []string{SchemaV1},
		Capabilities:      []string{"tools"},
	}
}

// Step does the next item of the checklist.
func (Executor) Step(ctx context.Context, host sdk.Host, req sdk.StepRequest) (sdk.StepResult, error) {
	sp, err := parseSpec(req.Spec)
	if err != nil {
		return sdk.Fail("executor_failed", "checklist: spec: "+err.Error()), nil
	}
	st, err := loadState(req.Checkpoint, len(sp.Items))
	if err != nil {
		// Never start again from item 1: that would redo work already done.
		return sdk.Fail("checkpoint_incompatible", "checklist: checkpoint: "+err.Error()), nil
	}
	// An earlier attempt of this step may have died while its write was in
	// flight (req.Indeterminate). Writing the same content to the same path
	// again is harmless, so the step simply runs again; an executor whose
	// effects are not idempotent would fail here or ask for an approval.
	n, item := st.Next+1, sp.Items[st.Next] // n counts from 1
	// A progress note is best effort: only a cancelled step stops here.
	if err := host.Progress(ctx, fmt.Sprintf("item %d/%d", n, len(sp.Items))); err != nil && ctx.Err() != nil {
		return sdk.StepResult{}, fmt.Errorf("checklist: %w", ctx.Err())
	}
	if err := pause(ctx, time.Duration(sp.PaceMS)*time.Millisecond); err != nil {
		return sdk.StepResult{}, fmt.Errorf("checklist: item %d: %w", n, err)
	}
	if err := writeItem(ctx, host, req.TaskID, n, item); err != nil {
		if f, ok := errors.AsType[*failure](err); ok {
			return sdk.Fail(f.reason, f.message), nil
		}
		return sdk.StepResult{}, err
	}

	next := state{Next: n}
	cp, err := next.checkpoint()
	if err != nil {
		return sdk.StepResult{}, err
	}
	summary := fmt.Sprintf("item %d/%d done: %s", n, len(sp.Items), echo(item))
	if next.Next < len(sp.Items) {
		return sdk.Continue(summary, cp), nil
	}
	result, err := json.Marshal(struct {
		Items int      `json:"items"`
		Files []string `json:"files"`
	}{len(sp.Items), itemPaths(len(sp.Items))})
	if err != nil {
		return sdk.StepResult{}, fmt.Errorf("checklist: result: %w", err)
	}
	return sdk.Complete(summary, result, cp), nil
}

// failure is an error that ends the step with sdk.Fail(reason, message):
// the task cannot go on, but nothing in the executor broke.
type failure struct{ reason, message string }

func (f *failure) Error() string { return f.reason + ": " + f.message }

// writeItem writes item n through the host. A cancelled step gets the
// context's error; a refused or failed write is a *failure.
func writeItem(ctx context.Context, host sdk.Host, taskID string, n int, item string) error {
	path := itemPath(n)
	args, err := json.Marshal(map[string]string{"path": path, "content": item})
	if err != nil {
		return fmt.Errorf("checklist: %w", err)
	}
	res, err := host.CallTool(ctx, sdk.ToolRequest{
		Name:      "workspace.write",
		Arguments: string(args),
		// One key per item of one task: the same effect under every
		// attempt, so the host's ledger can tell a repeat.
		IdempotencyKey: fmt.Sprintf("checklist/%s/item/%d", taskID, n),
	})
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("checklist: write %s: %w", path, ctx.Err())
	case err != nil:
		// An exhausted tool budget lands here too; the host then fails the
		// task with tool_budget_exhausted whatever the reason given.
		return &failure{"executor_failed", fmt.Sprintf("checklist: write %s: %v", path, err)}
	case res.IsError:
		return &failure{"executor_failed", fmt.Sprintf("checklist: write %s: %s", path, echo(res.Result))}
	}
	return nil
}

// pause waits for d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// spec is the "checklist" object of a task spec.
type spec struct {
	Items  []string `json:"items"`
	PaceMS int      `json:"pace_ms"`
}

// parseSpec reads the spec. The "checklist" object is read strictly, so
// that a misspelt option fails the task instead of doing nothing; other
// top-level fields ("goal", and whatever the host adds) are not ours.
func parseSpec(raw []byte) (spec, error) {
	var top struct {
		Checklist json.RawMessage `json:"checklist"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return spec{}, fmt.Errorf("not a JSON object: %w", err)
	}
	if len(top.Checklist) == 0 {
		return spec{}, errors.New(`"checklist" is missing: give {"checklist": {"items": [...]}}`)
	}
	var sp spec
	dec := json.NewDecoder(bytes.NewReader(top.Checklist))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return spec{}, fmt.Errorf("checklist: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return spec{}, errors.New("checklist: trailing data")
	}
	if len(sp.Items) == 0 || len(sp.Items) > maxItems {
		return spec{}, fmt.Errorf("checklist.items: has %d items, want 1 to %d", len(sp.Items), maxItems)
	}
	for i, it := range sp.Items {
		if strings.TrimSpace(it) == "" || len(it) > maxItemBytes {
			return spec{}, fmt.Errorf("checklist.items[%d]: must be non-empty and at most %d bytes", i, maxItemBytes)
		}
	}
	if sp.PaceMS < 0 || sp.PaceMS > maxPaceMS {
		return spec{}, fmt.Errorf("checklist.pace_ms: is %d, want 0 to %d", sp.PaceMS, maxPaceMS)
	}
	return sp, nil
}

// state is the checkpoint payload of schema checklist/1: the index of the
// next item to do. It stays a few bytes however long the checklist.
type state struct {
	Next int `json:"next"`
}

// loadState reads a checkpoint; nil is a task's first step.
func loadState(cp *sdk.Checkpoint, items int) (state, error) {
	if cp == nil {
		return state{}, nil
	}
	if cp.Schema != SchemaV1 {
		return state{}, fmt.Errorf("schema %q is not %q", cp.Schema, SchemaV1)
	}
	var st state
	dec := json.NewDecoder(bytes.NewReader(cp.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return state{}, fmt.Errorf("payload: %w", err)
	}
	if st.Next < 0 || st.Next >= items {
		return state{}, fmt.Errorf("payload: next is %d, want 0 to %d", st.Next, items-1)
	}
	return st, nil
}

func (st state) checkpoint() (*sdk.Checkpoint, error) {
	payload, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("checklist: checkpoint: %w", err)
	}
	return &sdk.Checkpoint{Schema: SchemaV1, Payload: payload}, nil
}

func itemPath(n int) string { return fmt.Sprintf("items/%d.txt", n) }

func itemPaths(n int) []string {
	paths := make([]string, n)
	for i := range paths {
		paths[i] = itemPath(i + 1)
	}
	return paths
}

// echo shortens s for a summary or a message, on one line.
func echo(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

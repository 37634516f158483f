package machinespirit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/sdk"
)

// protocolVersion is the version of the worker protocol. The worker
// announces its own in the hello frame; any other is refused.
const protocolVersion = 1

// errFrameTooLarge is returned for a frame over the bound, in either
// direction.
var errFrameTooLarge = errors.New("frame too large")

// protocolError is a frame from the worker that breaks the protocol:
// malformed JSON, an unknown type, a missing field, an oversized line. The
// worker that sent it is killed and the step fails.
type protocolError struct {
	msg string
	err error
}

func (e *protocolError) Error() string {
	if e.err != nil {
		return "worker protocol: " + e.msg + ": " + e.err.Error()
	}
	return "worker protocol: " + e.msg
}

func (e *protocolError) Unwrap() error { return e.err }

// inFrame is any frame from the worker. One struct for every type keeps
// decoding strict (unknown fields are refused) without a second pass;
// validate checks that a frame carries what its type needs.
type inFrame struct {
	Type string `json:"type"`
	ID   *int64 `json:"id"`

	// hello
	Protocol      int         `json:"protocol"`
	PrologVersion string      `json:"prolog_version"`
	Libraries     []string    `json:"libraries"`
	Missing       []string    `json:"missing"`
	Graphs        []graphInfo `json:"graphs"`
	Errors        []string    `json:"errors"`

	// graph_loaded, error and failed results
	OK      *bool  `json:"ok"`
	Graph   string `json:"graph"`
	Hash    string `json:"hash"`
	Code    string `json:"code"`
	Message string `json:"message"`

	// effect
	Kind      string          `json:"kind"`
	Messages  []wireMessage   `json:"messages"`
	Parent    *string         `json:"parent"`
	Tools     []string        `json:"tools"` // a model effect's: the tools its model may call
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Prompt    string          `json:"prompt"`
	Depth     *int            `json:"depth"`
	Note      string          `json:"note"`

	// result
	Outcome    string          `json:"outcome"`
	Summary    string          `json:"summary"`
	Checkpoint json.RawMessage `json:"checkpoint"`
	Result     json.RawMessage `json:"result"`
	Node       string          `json:"node"`
	Next       string          `json:"next"`
}

type graphInfo struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
}

type wireMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// decodeFrame parses one line from the worker.
func decodeFrame(line []byte) (*inFrame, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var f inFrame
	if err := dec.Decode(&f); err != nil {
		return nil, &protocolError{msg: "malformed frame", err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &protocolError{msg: "malformed frame: trailing data after the JSON object"}
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

func (f *inFrame) validate() error {
	bad := func(format string, args ...any) error {
		return &protocolError{msg: fmt.Sprintf("%s frame: ", f.Type) + fmt.Sprintf(format, args...)}
	}
	needID := func() error {
		if f.ID == nil {
			return bad("no id")
		}
		return nil
	}
	switch f.Type {
	case "hello":
		if f.Protocol == 0 || f.PrologVersion == "" {
			return bad("no protocol or prolog_version")
		}
	case "pong":
		return needID()
	case "graph_loaded", "module_loaded":
		if f.OK == nil {
			return bad("no ok")
		}
		return needID()
	case "error":
		if f.Code == "" {
			return bad("no code")
		}
	case "effect":
		if err := needID(); err != nil {
			return err
		}
		if msg := f.effectProblem(); msg != "" {
			return bad("%s", msg)
		}
	case "result":
		if err := needID(); err != nil {
			return err
		}
		if msg := f.resultProblem(); msg != "" {
			return bad("%s", msg)
		}
	default:
		return bad("unknown frame type")
	}
	return nil
}

// effectProblem says what an effect frame lacks for its kind ("": none).
func (f *inFrame) effectProblem() string {
	if f.Tools != nil && f.Kind != "model" {
		return "only a model effect names tools"
	}
	switch f.Kind {
	case "model":
		if len(f.Messages) == 0 || f.Parent == nil {
			return "a model effect needs messages and parent"
		}
		if err := checkToolNames(f.Tools); err != nil {
			return err.Error()
		}
	case "tool":
		if f.Name == "" || !isJSONObject(f.Arguments) {
			return "a tool effect needs a name and an arguments object"
		}
	case "approval":
		if f.Prompt == "" {
			return "an approval effect needs a prompt"
		}
	case "spirit":
		if f.Graph == "" || f.Parent == nil || f.Depth == nil {
			return "a spirit effect needs graph, parent and depth"
		}
	case "progress":
	default:
		return fmt.Sprintf("unknown effect kind %q", f.Kind)
	}
	return ""
}

// resultProblem says what a result frame lacks for its outcome ("": none).
func (f *inFrame) resultProblem() string {
	switch f.Outcome {
	case "continue", "interrupt":
		if !isJSONObject(f.Checkpoint) {
			return fmt.Sprintf("outcome %s needs a checkpoint object", f.Outcome)
		}
	case "complete":
		if !isJSONObject(f.Checkpoint) || len(f.Result) == 0 {
			return "outcome complete needs a checkpoint object and a result"
		}
	case "fail":
		if f.Code == "" {
			return "outcome fail needs a code"
		}
	case "cancelled":
	default:
		return fmt.Sprintf("unknown outcome %q", f.Outcome)
	}
	return ""
}

// Bounds on the tools one model effect offers its model.
const (
	maxModelTools    = 8
	maxToolNameBytes = 64
)

// checkToolNames checks a model effect's tool names: at most
// maxModelTools, each a non-empty name of at most maxToolNameBytes, none
// twice.
func checkToolNames(names []string) error {
	if len(names) > maxModelTools {
		return fmt.Errorf("tools: %d names; at most %d", len(names), maxModelTools)
	}
	for i, n := range names {
		switch {
		case n == "" || len(n) > maxToolNameBytes:
			return fmt.Errorf("tools[%d]: a name of 1..%d bytes, not %d", i, maxToolNameBytes, len(n))
		case slices.Contains(names[:i], n):
			return fmt.Errorf("tools[%d]: %q twice", i, n)
		}
	}
	return nil
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// readLine reads one '\n'-terminated line of at most max bytes (the
// newline not counted). A longer line is errFrameTooLarge: the reader stops
// there rather than buffer an unbounded line.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 || (len(line)+len(chunk) == max+1 && !bytes.HasSuffix(chunk, []byte{'\n'})) {
			return nil, fmt.Errorf("%w: a line from the worker exceeds %d bytes", errFrameTooLarge, max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, &protocolError{msg: "the worker's output ends in the middle of a frame"}
		default:
			return nil, err
		}
	}
}

// encodeFrame marshals a frame for the worker as one line, refusing one
// over max bytes (newline not counted).
func encodeFrame(v any, max int) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding a frame: %w", err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("%w: a %d-byte frame for the worker exceeds %d bytes", errFrameTooLarge, len(b), max)
	}
	return append(b, '\n'), nil
}

// Frames to the worker.

type pingFrame struct {
	Type string `json:"type"` // "ping"
	ID   int64  `json:"id"`
	Pad  string `json:"pad,omitempty"`
}

type loadGraphFrame struct {
	Type   string `json:"type"` // "load_graph"
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Source string `json:"source"`
}

type loadModuleFrame struct {
	Type   string `json:"type"` // "load_module"
	ID     int64  `json:"id"`
	Name   string `json:"name"` // the file's path, for messages
	Source string `json:"source"`
}

type runFrame struct {
	Type               string          `json:"type"` // "run"
	ID                 int64           `json:"id"`
	Graph              string          `json:"graph"`
	Input              json.RawMessage `json:"input"`
	Goal               string          `json:"goal"`
	ContextFile        *string         `json:"context_file"`
	Checkpoint         json.RawMessage `json:"checkpoint"`
	CheckpointMaxBytes int             `json:"checkpoint_max_bytes"`
	// Resume answers the checkpoint's pending interrupt.
	Resume *resumeFrame `json:"resume,omitempty"`
	// Children are the task's child tasks (StepRequest.Children), never
	// null: a graph's children field and Env.children are this list.
	Children []childFrame `json:"children"`
}

// childFrame is one child task as the worker sees it.
type childFrame struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Reason string `json:"reason"`
	Result string `json:"result"`
}

// Bounds on the children a run carries: the host's own (64 children, each
// result cut to 1000 characters), enforced here too so that the run frame
// and the checkpoint stay bounded whatever a host sends.
const (
	maxChildren         = 64
	maxChildResultChars = 1000
	maxChildFieldBytes  = 100
)

// childFrames converts a step's children for the worker, oldest first,
// keeping the newest maxChildren of them.
func childFrames(cs []sdk.ChildTask) []childFrame {
	if len(cs) > maxChildren {
		cs = cs[len(cs)-maxChildren:]
	}
	out := make([]childFrame, 0, len(cs))
	for _, c := range cs {
		out = append(out, childFrame{
			ID: truncate(c.TaskID, maxChildFieldBytes), Status: truncate(c.Status, maxChildFieldBytes),
			Reason: truncate(c.Reason, maxChildFieldBytes), Result: text.TruncateRunes(c.Result, maxChildResultChars),
		})
	}
	return out
}

type resumeFrame struct {
	Value json.RawMessage `json:"value"`
}

type cancelFrame struct {
	Type string `json:"type"` // "cancel"
	ID   int64  `json:"id"`
}

type shutdownFrame struct {
	Type string `json:"type"` // "shutdown"
}

type effectResultFrame struct {
	Type  string       `json:"type"` // "effect_result"
	ID    int64        `json:"id"`
	OK    bool         `json:"ok"`
	Value any          `json:"value,omitempty"`
	Error *effectError `json:"error,omitempty"`
}

// effectError is how a refused or failed effect reaches Prolog, as
// effect_error(Kind, Error, Message).
type effectError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

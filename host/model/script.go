package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Script bounds: a script is a hand-written test fixture, a few KiB.
const (
	MaxScriptBytes = 1 << 20 // a larger script file is refused
	MaxScriptRules = 1000    // more rules are refused
)

// ScriptVersion is the only script format version.
const ScriptVersion = 1

// The script file format, decoded strictly (unknown fields are errors).
type scriptFile struct {
	Version     int    `json:"version"`
	Description string `json:"description"`
	// Rules are decoded one by one, so an error names the rule.
	Rules []json.RawMessage `json:"rules"`
}

type scriptRule struct {
	Name  string      `json:"name"`
	Note  string      `json:"note"`
	When  scriptWhen  `json:"when"`
	Reply scriptReply `json:"reply"`
}

// scriptWhen holds a rule's conditions; all set conditions must hold.
type scriptWhen struct {
	LastRole       string `json:"last_role"`
	Contains       string `json:"contains"`
	Tool           string `json:"tool"`
	SystemContains string `json:"system_contains"`
	AnyContains    string `json:"any_contains"`
	// Pointers, so that 0 ("depth 0", "no assistant message yet") is a
	// condition distinct from "not set".
	Depth          *int `json:"depth"`
	AssistantTurns *int `json:"assistant_turns"`
}

type scriptReply struct {
	Content   string           `json:"content"`
	ToolCalls []scriptToolCall `json:"tool_calls"`
	Error     *scriptError     `json:"error"`
	// FinishReason and Usage are what an endpoint would report with the
	// reply ("length" for one cut at max_tokens).
	FinishReason string       `json:"finish_reason"`
	Usage        *scriptUsage `json:"usage"`
}

type scriptUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type scriptToolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type scriptError struct {
	Kind    string `json:"kind"`
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// script is a parsed, validated script. It is never modified after
// parseScript, so one script serves concurrent requests without locks.
type script struct {
	name  string // the file path, or embeddedScriptName
	rules []rule
}

type rule struct {
	index int // 1-based, for messages
	name  string
	when  scriptWhen
	// The reply: either err, or content and/or calls (arguments compacted).
	content string
	calls   []ToolCall // IDs are assigned per request
	finish  string
	usage   Usage
	err     *Error
}

// parseScript decodes and validates a script. name labels errors (the file
// path). Every error names the script and, where there is one, the rule and
// field.
func parseScript(name string, data []byte) (*script, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("model: script %s: %s", name, fmt.Sprintf(format, args...))
	}
	if len(data) > MaxScriptBytes {
		return nil, fail("%d bytes is larger than the %d-byte limit", len(data), MaxScriptBytes)
	}
	var f scriptFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, fmt.Errorf("model: script %s: %w", name, err)
	}
	switch {
	case f.Version == 0:
		return nil, fail("version is missing: a script starts with {\"version\": %d, ...}", ScriptVersion)
	case f.Version != ScriptVersion:
		return nil, fail("version = %d: must be %d", f.Version, ScriptVersion)
	case len(f.Rules) == 0:
		return nil, fail("no rules: a script needs at least one rule")
	case len(f.Rules) > MaxScriptRules:
		return nil, fail("%d rules: at most %d are allowed", len(f.Rules), MaxScriptRules)
	}
	s := &script{name: name, rules: make([]rule, 0, len(f.Rules))}
	for i, raw := range f.Rules {
		var sr scriptRule
		var r rule
		err := decodeStrict(raw, &sr)
		if err == nil {
			r, err = compileRule(i+1, sr)
		}
		if err != nil {
			label := fmt.Sprintf("rule %d", i+1)
			if sr.Name != "" {
				label += fmt.Sprintf(" (%q)", excerpt(sr.Name, 80))
			}
			return nil, fmt.Errorf("model: script %s: %s: %w", name, label, err)
		}
		s.rules = append(s.rules, r)
	}
	return s, nil
}

// loadScript reads and parses a script file, refusing a file over
// MaxScriptBytes without reading all of it.
func loadScript(path string) (*script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: script: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxScriptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("model: script %s: %w", path, err)
	}
	return parseScript(path, data)
}

func compileRule(index int, sr scriptRule) (rule, error) {
	w := sr.When
	if err := checkWhen(w); err != nil {
		return rule{}, err
	}
	r := rule{index: index, name: sr.Name, when: w}

	rp := sr.Reply
	if rp.Error != nil {
		if rp.Content != "" || len(rp.ToolCalls) > 0 {
			return rule{}, errors.New("reply.error excludes reply.content and reply.tool_calls")
		}
		var err error
		r.err, err = scriptedError(rp.Error)
		return r, err
	}
	if rp.Content == "" && len(rp.ToolCalls) == 0 {
		return rule{}, errors.New("reply is empty: give reply.content, reply.tool_calls or reply.error")
	}
	// Out-of-bounds replies are refused here rather than cut at reply time,
	// so a script never relies on a bound silently changing its reply.
	if len(rp.Content) > MaxContentBytes {
		return rule{}, fmt.Errorf("reply.content is %d bytes; at most %d are allowed", len(rp.Content), MaxContentBytes)
	}
	if len(rp.ToolCalls) > MaxToolCalls {
		return rule{}, fmt.Errorf("reply.tool_calls has %d calls; at most %d are allowed", len(rp.ToolCalls), MaxToolCalls)
	}
	r.content = rp.Content
	if len(rp.FinishReason) > 32 {
		return rule{}, fmt.Errorf("reply.finish_reason is %d bytes; at most 32 are allowed", len(rp.FinishReason))
	}
	r.finish = rp.FinishReason
	if u := rp.Usage; u != nil {
		if u.PromptTokens < 0 || u.CompletionTokens < 0 {
			return rule{}, errors.New("reply.usage: token counts must not be negative")
		}
		r.usage = Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, Reported: true}
	}
	for i, tc := range rp.ToolCalls {
		call, err := scriptedToolCall(fmt.Sprintf("reply.tool_calls[%d]", i), tc.Name, tc.Arguments)
		if err != nil {
			return rule{}, err
		}
		r.calls = append(r.calls, call)
	}
	return r, nil
}

// checkWhen refuses a rule's condition that no message could meet or that
// is out of bounds.
func checkWhen(w scriptWhen) error {
	switch w.LastRole {
	case "", RoleSystem, RoleUser, RoleAssistant, RoleTool:
	default:
		return fmt.Errorf("when.last_role = %q: must be %q, %q, %q or %q", excerpt(w.LastRole, 40), RoleSystem, RoleUser, RoleAssistant, RoleTool)
	}
	if w.Tool != "" {
		if w.LastRole != "" && w.LastRole != RoleTool {
			return fmt.Errorf("when.tool is set with when.last_role = %q: a tool result's role is %q", w.LastRole, RoleTool)
		}
		if len(w.Tool) > MaxToolNameBytes {
			return fmt.Errorf("when.tool is longer than %d bytes", MaxToolNameBytes)
		}
	}
	if w.Depth != nil && *w.Depth < 0 {
		return fmt.Errorf("when.depth = %d: must be 0 or more", *w.Depth)
	}
	if w.AssistantTurns != nil && *w.AssistantTurns < 0 {
		return fmt.Errorf("when.assistant_turns = %d: must be 0 or more", *w.AssistantTurns)
	}
	return nil
}

// scriptedError is the error a rule's reply.error makes its call fail with.
func scriptedError(se *scriptError) (*Error, error) {
	kind, ok := kindByName(se.Kind)
	if !ok {
		return nil, fmt.Errorf("reply.error.kind = %q: not a known error kind (e.g. %q, %q, %q)", excerpt(se.Kind, 40), KindScript, KindServer, KindRateLimited)
	}
	if se.Status < 0 || se.Status > 599 {
		return nil, fmt.Errorf("reply.error.status = %d: must be 0 or an HTTP status", se.Status)
	}
	msg := se.Message
	if msg == "" {
		msg = "scripted error"
	}
	return &Error{Kind: kind, Status: se.Status, Message: excerpt(msg, 1024)}, nil
}

// scriptedToolCall is a rule's tool call, its arguments compacted, named
// field in errors.
func scriptedToolCall(field, name string, arguments json.RawMessage) (ToolCall, error) {
	if name == "" || len(name) > MaxToolNameBytes {
		return ToolCall{}, fmt.Errorf("%s.name must be 1 to %d bytes", field, MaxToolNameBytes)
	}
	args := "{}"
	if raw := bytes.TrimSpace(arguments); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if raw[0] != '{' {
			return ToolCall{}, fmt.Errorf("%s.arguments must be a JSON object", field)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return ToolCall{}, fmt.Errorf("%s.arguments: %w", field, err)
		}
		args = buf.String()
	}
	if len(args) > MaxArgumentsBytes {
		return ToolCall{}, fmt.Errorf("%s.arguments are %d bytes; at most %d are allowed", field, len(args), MaxArgumentsBytes)
	}
	return ToolCall{Name: name, Arguments: args}, nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &jsonError{text: describeJSONError(data, err), err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// jsonError is a decoding error re-worded to point at the problem (the
// unknown field's name, or a line and column), keeping the original for
// errors.As.
type jsonError struct {
	text string
	err  error
}

func (e *jsonError) Error() string { return e.text }
func (e *jsonError) Unwrap() error { return e.err }

// describeJSONError words a decoding error of data.
func describeJSONError(data []byte, err error) string {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		// Offset counts the bytes read, the offending one included.
		line, col := lineCol(data, se.Offset-1)
		return fmt.Sprintf("invalid JSON at line %d, column %d: %s", line, col, se.Error())
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		// No position: a rule is decoded on its own, so an offset would
		// count from the rule, not the file; the field name says enough.
		where := "the top level"
		if te.Field != "" {
			where = "field " + te.Field
		}
		return fmt.Sprintf("%s: got a JSON %s, want %s", where, te.Value, jsonKind(te.Type.Kind().String()))
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + msg
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "empty or truncated JSON"
	}
	return err.Error()
}

// jsonKind names a Go kind the way a script author thinks of it.
func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64":
		return "a number"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return goKind
}

// lineCol converts a byte offset into a 1-based line and column.
func lineCol(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	if offset < 0 {
		offset = 0
	}
	before := data[:offset]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}

package model

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// defaultScript is the embedded default script (a copy of
// examples/scripts/legacy-demo.json; a test keeps the two identical). A
// string, not a []byte, so it cannot be modified.
//
//go:embed default_script.json
var defaultScript string

// embeddedScriptName labels the embedded script in error messages.
const embeddedScriptName = "<embedded default script>"

// scripted answers from a script: deterministic, no network.
type scripted struct {
	s *script
}

func newScripted(name string, data []byte) (Provider, error) {
	s, err := parseScript(name, data)
	if err != nil {
		return nil, err
	}
	return &scripted{s: s}, nil
}

func loadScripted(path string) (Provider, error) {
	s, err := loadScript(path)
	if err != nil {
		return nil, err
	}
	return &scripted{s: s}, nil
}

// maxNoMatchExcerpt bounds how much of the unmatched message the no-match
// error quotes: enough to recognise the prompt, never a whole transcript.
const maxNoMatchExcerpt = 200

// Complete replies with the first rule whose conditions all hold.
func (p *scripted) Complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, ctxError(ctx, err)
	}
	if err := checkRequest(req); err != nil {
		return Response{}, err
	}
	v := newView(req)
	for i := range p.s.rules {
		r := &p.s.rules[i]
		if !r.matches(req, v) {
			continue
		}
		if r.err != nil {
			e := *r.err // a copy: the script is shared and never modified
			e.Message = fmt.Sprintf("%s (rule %d of script %s)", e.Message, r.index, p.s.name)
			return Response{}, &e
		}
		msg := Message{Role: RoleAssistant, Content: r.content}
		if len(r.calls) > 0 {
			msg.ToolCalls = make([]ToolCall, len(r.calls))
			for j, c := range r.calls {
				c.ID = "call_" + strconv.Itoa(v.priorCalls+j+1)
				c.Arguments = fromToolResult(c.Arguments, req.Messages)
				msg.ToolCalls[j] = c
			}
		}
		return Response{Message: msg, FinishReason: r.finish, Usage: r.usage}, nil
	}
	return Response{}, &Error{
		Kind: KindScript,
		Message: fmt.Sprintf("no rule of script %s matched the last message (role %q, depth %d): %q",
			p.s.name, v.last.Role, req.Depth, excerpt(v.last.Content, maxNoMatchExcerpt)),
	}
}

// toolResultRef marks an argument value taken from the last tool result:
// "$tool_result.FIELD" is replaced by that result's top-level string
// field FIELD (a task id a tool returned, say), so that a deterministic
// script can act on what a tool answered.
const toolResultRef = "$tool_result."

// fromToolResult replaces every argument whose value is toolResultRef +
// FIELD with FIELD of the last tool result in msgs, when that result is
// a JSON object holding FIELD as a string; otherwise the value stays.
func fromToolResult(args string, msgs []Message) string {
	if !strings.Contains(args, toolResultRef) {
		return args
	}
	var last map[string]any
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleTool {
			if json.Unmarshal([]byte(msgs[i].Content), &last) != nil {
				return args
			}
			break
		}
	}
	var in map[string]any
	if json.Unmarshal([]byte(args), &in) != nil {
		return args
	}
	for k, v := range in {
		if ref, ok := v.(string); ok && strings.HasPrefix(ref, toolResultRef) {
			if got, ok := last[strings.TrimPrefix(ref, toolResultRef)].(string); ok {
				in[k] = got
			}
		}
	}
	out, err := json.Marshal(in)
	if err != nil {
		return args
	}
	return string(out)
}

// view is what rules look at, computed once per request.
type view struct {
	last     Message
	lastTool string // the tool whose result the last message is; "" when unknown
	// assistantTurns counts the assistant messages in the history: 0 on
	// the first call of a legacy step, 1 after one tool round, ...
	assistantTurns int
	// priorCalls counts the tool calls already in the history, so that new
	// IDs continue the sequence (call_1, call_2, ...) and never collide with
	// an earlier round's IDs within one conversation.
	priorCalls int
}

func newView(req Request) view {
	v := view{last: req.Messages[len(req.Messages)-1]}
	for _, m := range req.Messages {
		if m.Role == RoleAssistant {
			v.assistantTurns++
			v.priorCalls += len(m.ToolCalls)
		}
	}
	if v.last.Role == RoleTool {
		// The tool message names its call by ID only: find the name in the
		// assistant message that made the call.
	search:
		for i := len(req.Messages) - 2; i >= 0; i-- {
			for _, tc := range req.Messages[i].ToolCalls {
				if tc.ID == v.last.ToolCallID {
					v.lastTool = tc.Name
					break search
				}
			}
		}
	}
	return v
}

func (r *rule) matches(req Request, v view) bool {
	w := &r.when
	switch {
	case w.LastRole != "" && v.last.Role != w.LastRole:
		return false
	case w.Tool != "" && (v.last.Role != RoleTool || v.lastTool != w.Tool):
		return false
	case w.Contains != "" && !strings.Contains(v.last.Content, w.Contains):
		return false
	case w.Depth != nil && req.Depth != *w.Depth:
		return false
	case w.AssistantTurns != nil && v.assistantTurns != *w.AssistantTurns:
		return false
	case w.SystemContains != "" && !anyContains(req.Messages, RoleSystem, w.SystemContains):
		return false
	case w.AnyContains != "" && !anyContains(req.Messages, "", w.AnyContains):
		return false
	}
	return true
}

// anyContains reports whether a message of the role ("" for any role)
// contains sub.
func anyContains(msgs []Message, role, sub string) bool {
	for _, m := range msgs {
		if (role == "" || m.Role == role) && strings.Contains(m.Content, sub) {
			return true
		}
	}
	return false
}

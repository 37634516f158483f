package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/taskhost/taskhost/store"
)

// printer writes a watched task's events, one line each, and the JSON
// objects of --json.
type printer struct {
	e    *env
	json bool
}

func newPrinter(e *env, jsonOut bool) *printer { return &printer{e: e, json: jsonOut} }

func (p *printer) emit(v any) {
	data, _ := json.Marshal(v)
	fmt.Fprintln(p.e.stdout, string(data))
}

func (p *printer) event(ev store.Event) {
	if p.json {
		p.emit(map[string]any{"kind": "event", "seq": ev.Seq, "type": ev.Type, "time": ev.Time.UTC().Format(time.RFC3339Nano), "payload": json.RawMessage(ev.Payload)})
		return
	}
	var f map[string]any
	_ = json.Unmarshal(ev.Payload, &f)
	var parts []string
	for _, k := range []string{"attempt", "outcome", "reason", "exit", "limit", "note", "steps", "tools", "models", "wall_s", "tokens", "tokens_estimated", "output_bytes", "prompt_tokens", "completion_tokens", "model_ms"} {
		if v, ok := f[k]; ok {
			parts = append(parts, inert(fmt.Sprintf("%s=%v", k, v)))
		}
	}
	fmt.Fprintf(p.e.stdout, "%s  %-22s %s\n", ev.Time.Local().Format("15:04:05.000"), ev.Type, strings.Join(parts, " "))
}

func detail(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + inert(msg)
}

// taskView is the stable JSON shape of a task.
type taskView struct {
	ID        string            `json:"id"`
	Principal string            `json:"principal"`
	Executor  string            `json:"executor"`
	Status    string            `json:"status"`
	Reason    string            `json:"reason,omitempty"`
	Message   string            `json:"message,omitempty"`
	RunID     int64             `json:"run_id"`
	Budgets   map[string]meterV `json:"budgets"`
	Result    json.RawMessage   `json:"result,omitempty"`
	Created   string            `json:"created_at"`
	Updated   string            `json:"updated_at"`
	// Host is the host that holds the task's run or last held it: `task
	// status` only.
	Host string `json:"host,omitempty"`
	// QueuePosition is a pending task's place in the queue (1 is next).
	QueuePosition int64 `json:"queue_position,omitempty"`
	// ModelUsage is what the task's model calls cost: `task status` only.
	ModelUsage *usageView `json:"model_usage,omitempty"`
	// The task's place in a task tree: its parent and root ("" for a
	// root) and its depth below the root.
	ParentID  string `json:"parent_task_id,omitempty"`
	RootID    string `json:"root_task_id,omitempty"`
	TreeDepth int64  `json:"tree_depth,omitempty"`
}

type meterV struct {
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"`
	// EstimatedCalls, of model_tokens: the answered calls whose tokens
	// the host estimated (the provider reported none).
	EstimatedCalls int64 `json:"estimated_calls,omitempty"`
}

func taskJSON(t store.Task) taskView {
	b := t.Budgets
	v := taskView{
		ID: t.ID, Principal: t.PrincipalID, Executor: t.Executor, Status: string(t.Status),
		Reason: string(t.Reason), Message: t.Message, RunID: t.RunID,
		Budgets: map[string]meterV{
			"steps": {b.Steps.Used, b.Steps.Limit, 0}, "tool_calls": {b.ToolCalls.Used, b.ToolCalls.Limit, 0},
			"model_calls": {b.ModelCalls.Used, b.ModelCalls.Limit, 0}, "depth": {b.Depth.Used, b.Depth.Limit, 0},
			"wall_ms":      {b.WallMillis.Used, b.WallMillis.Limit, 0},
			"model_tokens": {b.ModelTokens.Used, b.ModelTokens.Limit, b.TokensEstimated},
			"output_bytes": {b.OutputBytes.Used, b.OutputBytes.Limit, 0},
		},
		Created: t.CreatedAt.UTC().Format(time.RFC3339Nano), Updated: t.UpdatedAt.UTC().Format(time.RFC3339Nano),
		ParentID: t.ParentID, RootID: t.RootID, TreeDepth: t.TreeDepth,
	}
	if len(t.Result) > 0 {
		if json.Valid(t.Result) {
			v.Result = t.Result
		} else {
			v.Result, _ = json.Marshal(string(t.Result))
		}
	}
	return v
}

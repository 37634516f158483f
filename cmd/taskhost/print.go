package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/taskhost/taskhost/shared/proto/apipb"
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

func (p *printer) event(ev *apipb.Event) {
	at := time.Unix(0, ev.GetTimeUnixNano())
	if p.json {
		p.emit(map[string]any{"kind": "event", "seq": ev.GetSeq(), "type": ev.GetType(), "time": at.UTC().Format(time.RFC3339Nano), "payload": json.RawMessage(ev.GetPayload())})
		return
	}
	var f map[string]any
	_ = json.Unmarshal(ev.GetPayload(), &f)
	var parts []string
	for _, k := range []string{"attempt", "outcome", "reason", "exit", "limit", "note", "steps", "tools", "models", "wall_s", "tokens", "tokens_estimated", "output_bytes", "prompt_tokens", "completion_tokens", "model_ms"} {
		if v, ok := f[k]; ok {
			parts = append(parts, inert(fmt.Sprintf("%s=%v", k, v)))
		}
	}
	fmt.Fprintf(p.e.stdout, "%s  %-22s %s\n", at.Local().Format("15:04:05.000"), ev.GetType(), strings.Join(parts, " "))
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

func taskJSON(t *apipb.Task) taskView {
	b := t.GetBudgets()
	m := func(x *apipb.Meter) meterV { return meterV{Used: x.GetUsed(), Limit: x.GetLimit()} }
	tokens := m(b.GetModelTokens())
	tokens.EstimatedCalls = b.GetModelTokensEstimatedCalls()
	v := taskView{
		ID: t.GetId(), Principal: t.GetPrincipal(), Executor: t.GetExecutor(), Status: t.GetStatus(),
		Reason: t.GetReason(), Message: t.GetMessage(), RunID: t.GetRunId(),
		Budgets: map[string]meterV{
			"steps": m(b.GetSteps()), "tool_calls": m(b.GetToolCalls()), "model_calls": m(b.GetModelCalls()), "depth": m(b.GetDepth()),
			"wall_ms": m(b.GetWallMs()), "model_tokens": tokens, "output_bytes": m(b.GetOutputBytes()),
		},
		Created: rfc3339Always(t.GetCreatedUnixNano()), Updated: rfc3339Always(t.GetUpdatedUnixNano()),
		ParentID: t.GetParentTaskId(), RootID: t.GetRootTaskId(), TreeDepth: t.GetTreeDepth(),
	}
	if r := t.GetResult(); len(r) > 0 {
		if json.Valid(r) {
			v.Result = r
		} else {
			v.Result, _ = json.Marshal(string(r))
		}
	}
	return v
}

// rfc3339Always is n as an RFC 3339 UTC time; 0 is the zero time, as the
// JSON shapes have always written a missing one.
func rfc3339Always(n int64) string {
	if n == 0 {
		return time.Time{}.Format(time.RFC3339Nano)
	}
	return time.Unix(0, n).UTC().Format(time.RFC3339Nano)
}

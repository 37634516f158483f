package main

import (
	"cmp"
	"fmt"
	"github.com/taskhost/taskhost/host/tools"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// The client shows the API's messages in the same shapes as `taskhost
// inspect` and `taskhost run`: they are converted to the store's types and
// printed by the same code.

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func budgetFromPB(m *apipb.Meter) store.Budget {
	return store.Budget{Used: m.GetUsed(), Limit: m.GetLimit()}
}

func taskFromPB(t *apipb.Task) store.Task {
	b := t.GetBudgets()
	return store.Task{
		ID: t.GetId(), PrincipalID: t.GetPrincipal(), Executor: t.GetExecutor(), Spec: t.GetSpec(),
		Status: store.Status(t.GetStatus()), Reason: store.Reason(t.GetReason()), Message: t.GetMessage(), RunID: t.GetRunId(),
		Budgets: store.Budgets{
			Steps: budgetFromPB(b.GetSteps()), ToolCalls: budgetFromPB(b.GetToolCalls()), ModelCalls: budgetFromPB(b.GetModelCalls()),
			Depth: budgetFromPB(b.GetDepth()), WallMillis: budgetFromPB(b.GetWallMs()),
			ModelTokens: budgetFromPB(b.GetModelTokens()), OutputBytes: budgetFromPB(b.GetOutputBytes()),
			TokensEstimated: b.GetModelTokensEstimatedCalls(),
		},
		Result: t.GetResult(), CreatedAt: fromNanos(t.GetCreatedUnixNano()), UpdatedAt: fromNanos(t.GetUpdatedUnixNano()),
		ParentID: t.GetParentTaskId(), RootID: t.GetRootTaskId(), TreeDepth: t.GetTreeDepth(),
	}
}

func attemptFromPB(a *apipb.Attempt) store.Attempt {
	return store.Attempt{
		Number: a.GetNumber(), RunID: a.GetRunId(), Status: store.AttemptStatus(a.GetStatus()), Outcome: a.GetOutcome(),
		Summary: a.GetSummary(), Reason: store.Reason(a.GetReason()), Message: a.GetMessage(),
		StartedAt: fromNanos(a.GetStartedUnixNano()), EndedAt: fromNanos(a.GetEndedUnixNano()),
		ExitCode: int(a.GetExitCode()), ExitSignal: a.GetExitSignal(), StderrTail: a.GetStderrTail(),
	}
}

func eventFromPB(ev *apipb.Event) store.Event {
	return store.Event{Seq: ev.GetSeq(), TaskID: ev.GetTaskId(), RunID: ev.GetRunId(), Type: ev.GetType(),
		Time: fromNanos(ev.GetTimeUnixNano()), Payload: ev.GetPayload()}
}

func rfc3339(n int64) string {
	if n == 0 {
		return ""
	}
	return time.Unix(0, n).UTC().Format(time.RFC3339Nano)
}

// approvalView is the stable JSON shape of an approval.
type approvalView struct {
	ID         string `json:"id"`
	TaskID     string `json:"task_id"`
	RunID      int64  `json:"run_id"`
	Attempt    int64  `json:"attempt"`
	Kind       string `json:"kind,omitempty"` // tool | approval | input
	Tool       string `json:"tool,omitempty"`
	Prompt     string `json:"prompt"`
	Status     string `json:"status"`
	CreatedAt  string `json:"created_at"`
	ExpiresAt  string `json:"expires_at"`
	ResolvedAt string `json:"resolved_at,omitempty"`
	// Scope (once | task) and Pattern: an approved approval's tier.
	Scope   string `json:"scope,omitempty"`
	Pattern string `json:"pattern,omitempty"`
}

func approvalJSON(a *apipb.Approval) approvalView {
	return approvalView{
		ID: a.GetId(), TaskID: a.GetTaskId(), RunID: a.GetRunId(), Attempt: a.GetAttempt(), Kind: a.GetKind(), Tool: a.GetTool(),
		Prompt: a.GetPrompt(), Status: a.GetStatus(), CreatedAt: rfc3339(a.GetCreatedUnixNano()),
		ExpiresAt: rfc3339(a.GetExpiresUnixNano()), ResolvedAt: rfc3339(a.GetResolvedUnixNano()),
		Scope: a.GetScope(), Pattern: a.GetPattern(),
	}
}

// executorView is the stable JSON shape of an executor.
type executorView struct {
	Kind              string            `json:"kind"`
	Default           bool              `json:"default"`
	Version           string            `json:"version,omitempty"`
	ProtocolVersion   int32             `json:"protocol_version,omitempty"`
	CheckpointSchemas []string          `json:"checkpoint_schemas"`
	Capabilities      []string          `json:"capabilities"`
	Runtime           map[string]string `json:"runtime"`
	Path              string            `json:"path,omitempty"`
	Pinned            bool              `json:"pinned"`
	SHA256            string            `json:"sha256,omitempty"`
	Preflight         preflightView     `json:"preflight"`
	Confinement       string            `json:"confinement"`
}

type preflightView struct {
	OK     bool   `json:"ok"`
	Check  string `json:"check,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func executorJSON(x *apipb.Executor) executorView {
	v := executorView{
		Kind: x.GetKind(), Default: x.GetDefault(), Version: x.GetVersion(), ProtocolVersion: x.GetProtocolVersion(),
		CheckpointSchemas: nonNil(x.GetCheckpointSchemas()), Capabilities: nonNil(x.GetCapabilities()),
		Runtime: x.GetRuntime(), Path: x.GetPath(), Pinned: x.GetSha256() != "", SHA256: x.GetSha256(),
		Preflight: preflightOf(x), Confinement: x.GetConfinement(),
	}
	if v.Runtime == nil {
		v.Runtime = map[string]string{}
	}
	return v
}

// preflightOf is an executor's preflight result: unavailable in the
// daemon's registry, or described by the executor as a failed runtime
// preflight (Runtime["preflight"] = "failed: ...", e.g. a wrong
// SWI-Prolog), which refuses every step.
func preflightOf(x *apipb.Executor) preflightView {
	if !x.GetAvailable() {
		return preflightView{OK: false, Check: x.GetUnavailableCheck(), Detail: x.GetUnavailableDetail()}
	}
	if p := x.GetRuntime()["preflight"]; strings.HasPrefix(p, "failed") {
		return preflightView{OK: false, Check: "runtime", Detail: p}
	}
	return preflightView{OK: true}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// meters renders a task's budgets as used/limit meters.
func meters(b store.Budgets) string {
	return fmt.Sprintf("steps %d/%d  tools %d/%d  models %d/%d  depth %d/%d  wall %.1fs/%ds  %s  output %d/%dB",
		b.Steps.Used, b.Steps.Limit, b.ToolCalls.Used, b.ToolCalls.Limit, b.ModelCalls.Used, b.ModelCalls.Limit,
		b.Depth.Used, b.Depth.Limit, float64(b.WallMillis.Used)/1000, b.WallMillis.Limit/1000, tokenMeter(b),
		b.OutputBytes.Used, b.OutputBytes.Limit)
}

// tokenMeter is the token budget as used/limit, marked when some of it is
// the host's estimate.
func tokenMeter(b store.Budgets) string {
	s := fmt.Sprintf("tokens %d/%d", b.ModelTokens.Used, b.ModelTokens.Limit)
	if b.TokensEstimated > 0 {
		s += fmt.Sprintf(" (estimated for %d calls)", b.TokensEstimated)
	}
	return s
}

// writeTaskDetail prints one task with its budgets and attempt log; host,
// when known, is the host that holds (or last held) its run.
// usageLine is what model calls cost, for a person.
func usageLine(u store.ModelUsage) string {
	return fmt.Sprintf("%d calls, %d prompt + %d completion tokens, %.1fs", u.Calls, u.PromptTokens, u.CompletionTokens, float64(u.Millis)/1000)
}

func usageFromPB(u *apipb.ModelUsage) *store.ModelUsage {
	if u == nil {
		return nil
	}
	return &store.ModelUsage{Calls: u.GetCalls(), PromptTokens: u.GetPromptTokens(), CompletionTokens: u.GetCompletionTokens(), Millis: u.GetDurationMs()}
}

// usageView is the stable JSON shape of model usage.
type usageView struct {
	Calls            int64 `json:"calls"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	DurationMillis   int64 `json:"duration_ms"`
}

func usageJSON(u *store.ModelUsage) *usageView {
	if u == nil {
		return nil
	}
	return &usageView{Calls: u.Calls, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, DurationMillis: u.Millis}
}

// writeTaskDetail prints a task, its attempts and, when known (usage not
// nil), what its model calls cost.
func writeTaskDetail(w io.Writer, t store.Task, host string, usage *store.ModelUsage, atts []store.Attempt, omitted int64) {
	fmt.Fprintf(w, "task      %s\nexecutor  %s\nstatus    %s", t.ID, t.Executor, t.Status)
	if t.Reason != "" {
		fmt.Fprintf(w, " (%s)", t.Reason)
	}
	fmt.Fprintln(w)
	if t.Message != "" {
		fmt.Fprintf(w, "message   %s\n", inert(t.Message))
	}
	fmt.Fprintf(w, "run       %d\n", t.RunID)
	if host != "" {
		fmt.Fprintf(w, "host      %s\n", host)
	}
	fmt.Fprintf(w, "budgets   %s\n", meters(t.Budgets))
	if usage != nil && usage.Calls > 0 {
		fmt.Fprintf(w, "model     %s\n", usageLine(*usage))
	}
	if !t.CreatedAt.IsZero() {
		fmt.Fprintf(w, "created   %s\n", t.CreatedAt.Local().Format(time.DateTime))
	}
	if len(t.Result) > 0 {
		fmt.Fprintf(w, "result    %s\n", inert(string(t.Result)))
	}
	if len(atts) == 0 {
		fmt.Fprintln(w, "\n(no attempts yet)")
		return
	}
	if omitted > 0 {
		fmt.Fprintf(w, "\n(%d older attempts not shown)", omitted)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nATTEMPT\tRUN\tSTATUS\tOUTCOME\tREASON\tEXIT\tDURATION\tSUMMARY")
	for _, a := range atts {
		av := attemptJSON(a)
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Number, a.RunID, a.Status, a.Outcome, a.Reason, av.Exit, av.Duration, truncateLine(inert(a.Summary), 60))
	}
	tw.Flush()
	// The newest crash's last stderr lines say why it died; older ones
	// are in --json.
	for i := len(atts) - 1; i >= 0; i-- {
		if tail := atts[i].StderrTail; tail != "" {
			fmt.Fprintf(w, "\nattempt %d: last stderr lines of the plugin\n", atts[i].Number)
			for _, l := range strings.Split(tail, "\n") {
				fmt.Fprintf(w, "  | %s\n", printable(l))
			}
			break
		}
	}
}

// writeAttemptFull prints one attempt's whole summary and message (the
// table cuts them to a line).
func writeAttemptFull(w io.Writer, a store.Attempt, usage *store.ModelUsage) {
	fmt.Fprintf(w, "\nattempt %d (%s", a.Number, a.Status)
	if a.Reason != "" {
		fmt.Fprintf(w, ", %s", a.Reason)
	}
	fmt.Fprintln(w, ")")
	if usage != nil && usage.Calls > 0 {
		fmt.Fprintf(w, "  model:   %s\n", usageLine(*usage))
	}
	for _, f := range []struct{ label, text string }{{"summary", a.Summary}, {"message", a.Message}} {
		if f.text == "" {
			continue
		}
		fmt.Fprintf(w, "  %s:\n", f.label)
		for _, l := range strings.Split(f.text, "\n") {
			fmt.Fprintf(w, "    %s\n", inert(l))
		}
	}
}

// printable replaces the control characters of a line a plugin wrote, so
// that it cannot drive the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || (!unicode.IsControl(r) && r != utf8.RuneError) {
			return r
		}
		return '?'
	}, s)
}

// inert is how every text view prints what a model, an executor or a
// plugin wrote (a summary, a message, a result, an event's note): one line
// a terminal shows and never obeys. Control characters — the ESC of a
// clipboard write (OSC 52), a title change or a clear screen, CR, newlines
// — and the bidirectional overrides are written as \xNN or \uNNNN, and
// invalid UTF-8 as \xNN; nothing is cut. --json prints the text as it is,
// JSON-escaped.
func inert(s string) string { return tools.Printable(s, 4*len(s)+16) }

// writeTaskTable prints tasks one per line.
// queuedStatus is t's status, with its place in the queue when pending:
// "pending #3".
func queuedStatus(t store.Task, queue map[string]int64) string {
	if p := queue[t.ID]; p > 0 && t.Status == store.StatusPending {
		return fmt.Sprintf("%s #%d", t.Status, p)
	}
	return string(t.Status)
}

func writeTaskTable(w io.Writer, tasks []store.Task, queue map[string]int64) {
	if slices.ContainsFunc(tasks, func(t store.Task) bool { return t.ParentID != "" }) {
		writeTreeTaskTable(w, tasks, queue)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEXECUTOR\tSTATUS\tREASON\tRUN\tSTEPS\tCREATED")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d/%d\t%s\n", t.ID, t.Executor, queuedStatus(t, queue), t.Reason, t.RunID,
			t.Budgets.Steps.Used, t.Budgets.Steps.Limit, t.CreatedAt.Local().Format(time.DateTime))
	}
	tw.Flush()
}

// writeTreeTaskTable is the task table of a listing with delegated tasks:
// a PARENT column ("-" for a root) and a CHILDREN count among the listed.
func writeTreeTaskTable(w io.Writer, tasks []store.Task, queue map[string]int64) {
	kids := map[string]int{}
	for _, t := range tasks {
		if t.ParentID != "" {
			kids[t.ParentID]++
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPARENT\tCHILDREN\tEXECUTOR\tSTATUS\tREASON\tRUN\tSTEPS\tCREATED")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d/%d\t%s\n", t.ID, cmp.Or(t.ParentID, "-"), kids[t.ID], t.Executor, queuedStatus(t, queue), t.Reason, t.RunID,
			t.Budgets.Steps.Used, t.Budgets.Steps.Limit, t.CreatedAt.Local().Format(time.DateTime))
	}
	tw.Flush()
}

// writeTree prints a task's tree, one task a line, indented by depth,
// the shown task marked.
func writeTree(w io.Writer, shown string, tree []store.Task) {
	if len(tree) == 0 {
		return
	}
	fmt.Fprintln(w, "\ntree:")
	var walk func(parent string)
	walk = func(parent string) {
		for _, t := range tree {
			if t.ParentID != parent {
				continue
			}
			mark := ""
			if t.ID == shown {
				mark = "  <- this task"
			}
			reason := ""
			if t.Reason != "" {
				reason = " (" + string(t.Reason) + ")"
			}
			fmt.Fprintf(w, "  %s%s %s%s%s\n", strings.Repeat("  ", int(t.TreeDepth)), t.ID, t.Status, reason, mark)
			walk(t.ID)
		}
	}
	walk("")
}

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

// Every view here prints the API's messages (shared/proto/api.proto):
// what the daemon sends, and what `taskhost inspect` reads from the store
// converted as the API converts it (api.TaskMessage).

// localTime is a message's Unix nanoseconds as the local time a person
// reads ("" for none).
func localTime(n int64) string {
	if n == 0 {
		return ""
	}
	return time.Unix(0, n).Local().Format(time.DateTime)
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
func meters(b *apipb.Budgets) string {
	return fmt.Sprintf("steps %s  tools %s  models %s  depth %s  wall %.1fs/%ds  %s  output %sB",
		meter(b.GetSteps()), meter(b.GetToolCalls()), meter(b.GetModelCalls()), meter(b.GetDepth()),
		float64(b.GetWallMs().GetUsed())/1000, b.GetWallMs().GetLimit()/1000, tokenMeter(b), meter(b.GetOutputBytes()))
}

// meter is one budget as used/limit.
func meter(m *apipb.Meter) string { return fmt.Sprintf("%d/%d", m.GetUsed(), m.GetLimit()) }

// tokenMeter is the token budget as used/limit, marked when some of it is
// the host's estimate.
func tokenMeter(b *apipb.Budgets) string {
	s := "tokens " + meter(b.GetModelTokens())
	if n := b.GetModelTokensEstimatedCalls(); n > 0 {
		s += fmt.Sprintf(" (estimated for %d calls)", n)
	}
	return s
}

// usageLine is what model calls cost, for a person.
func usageLine(u *apipb.ModelUsage) string {
	return fmt.Sprintf("%d calls, %d prompt + %d completion tokens, %.1fs", u.GetCalls(), u.GetPromptTokens(), u.GetCompletionTokens(), float64(u.GetDurationMs())/1000)
}

// usageView is the stable JSON shape of model usage.
type usageView struct {
	Calls            int64 `json:"calls"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	DurationMillis   int64 `json:"duration_ms"`
}

func usageJSON(u *apipb.ModelUsage) *usageView {
	if u == nil {
		return nil
	}
	return &usageView{Calls: u.GetCalls(), PromptTokens: u.GetPromptTokens(), CompletionTokens: u.GetCompletionTokens(), DurationMillis: u.GetDurationMs()}
}

// writeTaskDetail prints a task, its attempts and, when the daemon tells
// (t.ModelUsage set), what its model calls cost; t.LeaseHost, when set, is
// the host that holds (or last held) its run.
func writeTaskDetail(w io.Writer, t *apipb.Task, atts []*apipb.Attempt, omitted int64) {
	fmt.Fprintf(w, "task      %s\nexecutor  %s\nstatus    %s", t.GetId(), t.GetExecutor(), t.GetStatus())
	if t.GetReason() != "" {
		fmt.Fprintf(w, " (%s)", t.GetReason())
	}
	fmt.Fprintln(w)
	if t.GetMessage() != "" {
		fmt.Fprintf(w, "message   %s\n", inert(t.GetMessage()))
	}
	fmt.Fprintf(w, "run       %d\n", t.GetRunId())
	if t.GetLeaseHost() != "" {
		fmt.Fprintf(w, "host      %s\n", t.GetLeaseHost())
	}
	fmt.Fprintf(w, "budgets   %s\n", meters(t.GetBudgets()))
	if u := t.GetModelUsage(); u.GetCalls() > 0 {
		fmt.Fprintf(w, "model     %s\n", usageLine(u))
	}
	if c := localTime(t.GetCreatedUnixNano()); c != "" {
		fmt.Fprintf(w, "created   %s\n", c)
	}
	if len(t.GetResult()) > 0 {
		fmt.Fprintf(w, "result    %s\n", inert(string(t.GetResult())))
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
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.GetNumber(), a.GetRunId(), a.GetStatus(), a.GetOutcome(), a.GetReason(), av.Exit, av.Duration, truncateLine(inert(a.GetSummary()), 60))
	}
	tw.Flush()
	// The newest crash's last stderr lines say why it died; older ones
	// are in --json.
	for i := len(atts) - 1; i >= 0; i-- {
		if tail := atts[i].GetStderrTail(); tail != "" {
			fmt.Fprintf(w, "\nattempt %d: last stderr lines of the plugin\n", atts[i].GetNumber())
			for _, l := range strings.Split(tail, "\n") {
				fmt.Fprintf(w, "  | %s\n", printable(l))
			}
			break
		}
	}
}

// writeAttemptFull prints one attempt's whole summary and message (the
// table cuts them to a line) and what its model calls cost.
func writeAttemptFull(w io.Writer, a *apipb.Attempt) {
	fmt.Fprintf(w, "\nattempt %d (%s", a.GetNumber(), a.GetStatus())
	if a.GetReason() != "" {
		fmt.Fprintf(w, ", %s", a.GetReason())
	}
	fmt.Fprintln(w, ")")
	if u := a.GetModelUsage(); u.GetCalls() > 0 {
		fmt.Fprintf(w, "  model:   %s\n", usageLine(u))
	}
	for _, f := range []struct{ label, text string }{{"summary", a.GetSummary()}, {"message", a.GetMessage()}} {
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

// queuedStatus is t's status, with its place in the queue when pending:
// "pending #3".
func queuedStatus(t *apipb.Task) string {
	if p := t.GetQueuePosition(); p > 0 && t.GetStatus() == string(store.StatusPending) {
		return fmt.Sprintf("%s #%d", t.GetStatus(), p)
	}
	return t.GetStatus()
}

// writeTaskTable prints tasks one per line.
func writeTaskTable(w io.Writer, tasks []*apipb.Task) {
	if slices.ContainsFunc(tasks, func(t *apipb.Task) bool { return t.GetParentTaskId() != "" }) {
		writeTreeTaskTable(w, tasks)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEXECUTOR\tSTATUS\tREASON\tRUN\tSTEPS\tCREATED")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.GetId(), t.GetExecutor(), queuedStatus(t), t.GetReason(), t.GetRunId(),
			meter(t.GetBudgets().GetSteps()), localTime(t.GetCreatedUnixNano()))
	}
	tw.Flush()
}

// writeTreeTaskTable is the task table of a listing with delegated tasks:
// a PARENT column ("-" for a root) and a CHILDREN count among the listed.
func writeTreeTaskTable(w io.Writer, tasks []*apipb.Task) {
	kids := map[string]int{}
	for _, t := range tasks {
		if p := t.GetParentTaskId(); p != "" {
			kids[p]++
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPARENT\tCHILDREN\tEXECUTOR\tSTATUS\tREASON\tRUN\tSTEPS\tCREATED")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", t.GetId(), cmp.Or(t.GetParentTaskId(), "-"), kids[t.GetId()], t.GetExecutor(), queuedStatus(t), t.GetReason(), t.GetRunId(),
			meter(t.GetBudgets().GetSteps()), localTime(t.GetCreatedUnixNano()))
	}
	tw.Flush()
}

// writeTree prints a task's tree, one task a line, indented by depth,
// the shown task marked.
func writeTree(w io.Writer, shown string, tree []*apipb.Task) {
	if len(tree) == 0 {
		return
	}
	fmt.Fprintln(w, "\ntree:")
	var walk func(parent string)
	walk = func(parent string) {
		for _, t := range tree {
			if t.GetParentTaskId() != parent {
				continue
			}
			mark := ""
			if t.GetId() == shown {
				mark = "  <- this task"
			}
			reason := ""
			if t.GetReason() != "" {
				reason = " (" + t.GetReason() + ")"
			}
			fmt.Fprintf(w, "  %s%s %s%s%s\n", strings.Repeat("  ", int(t.GetTreeDepth())), t.GetId(), t.GetStatus(), reason, mark)
			walk(t.GetId())
		}
	}
	walk("")
}

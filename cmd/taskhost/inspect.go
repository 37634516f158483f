package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/taskhost/taskhost/host/api"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

func inspectCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	dataDir := fs.String("data-dir", defaultDataDir(), "data directory; env TASKHOST_DATA_DIR")
	principal := fs.String("principal", localPrincipal(), "whose tasks to read")
	jsonOut := fs.Bool("json", false, "print JSON")
	effects := fs.Bool("effects", false, "with ID and --json: add the task's whole effect ledger (every model call, tool call and approval of every attempt, replays included)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: taskhost inspect [flags] [ID]\n\nPrints the tasks of a principal, or one task with its budgets and attempts,\nstraight from the store (read-only; safe while a host runs).\n\nFlags:")
		fs.PrintDefaults()
	}
	ids, code, ok := parseArgs(e, fs, args, 0, 1)
	if !ok {
		return code
	}
	if *effects && (len(ids) != 1 || !*jsonOut) {
		errorf(e, "inspect: --effects needs one task ID and --json")
		return exitUsage
	}
	if err := datadir.RefusePostgres(*dataDir, "inspect it"); err != nil {
		errorf(e, "inspect: %v", err)
		return exitUnavailable
	}
	st, err := store.Open(ctx, filepath.Join(*dataDir, datadir.StoreFile), store.Options{ReadOnly: true})
	if err != nil {
		errorf(e, "%v", err)
		return exitUnavailable
	}
	defer st.Close()
	p := newPrinter(e, *jsonOut)
	if len(ids) == 1 {
		return inspectOne(ctx, p, st, *principal, ids[0], *effects)
	}
	var all []store.Task
	var after int64
	for {
		page, err := st.ListTasks(ctx, *principal, store.ListQuery{AfterSeq: after, Limit: 1000})
		if err != nil {
			errorf(e, "%v", err)
			return exitCodeFor(err)
		}
		all = append(all, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Seq
	}
	tasks := make([]*apipb.Task, 0, len(all))
	for _, t := range all {
		tasks = append(tasks, api.TaskMessage(t))
	}
	if p.json {
		views := make([]taskView, 0, len(tasks))
		for _, t := range tasks {
			views = append(views, taskJSON(t))
		}
		p.emit(map[string]any{"tasks": views})
		return exitOK
	}
	writeTaskTable(e.stdout, tasks)
	return exitOK
}

func inspectOne(ctx context.Context, p *printer, st *store.Store, principal, id string, effects bool) int {
	e := p.e
	t, err := st.GetTask(ctx, principal, id)
	if err != nil {
		errorf(e, "task %s: %v", id, err)
		return exitCodeFor(err)
	}
	atts, err := st.ListAttempts(ctx, principal, id)
	if err != nil {
		errorf(e, "%v", err)
		return exitCodeFor(err)
	}
	task := api.TaskMessage(t)
	attempts := make([]*apipb.Attempt, 0, len(atts))
	for _, a := range atts {
		attempts = append(attempts, api.AttemptMessage(a))
	}
	if p.json {
		views := make([]attemptView, 0, len(attempts))
		for _, a := range attempts {
			views = append(views, attemptJSON(a))
		}
		out := map[string]any{"task": taskJSON(task), "attempts": views}
		if effects {
			effs, err := st.ListEffects(ctx, principal, id)
			if err != nil {
				errorf(e, "%v", err)
				return exitCodeFor(err)
			}
			out["effects"] = ledgerJSON(effs)
		}
		p.emit(out)
		return exitOK
	}
	writeTaskDetail(e.stdout, task, attempts, 0)
	return exitOK
}

type attemptView struct {
	Number     int64  `json:"attempt"`
	RunID      int64  `json:"run_id"`
	Status     string `json:"status"`
	Outcome    string `json:"outcome,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Message    string `json:"message,omitempty"`
	Summary    string `json:"summary,omitempty"`
	Exit       string `json:"exit,omitempty"`
	StderrTail string `json:"stderr_tail,omitempty"`
	Started    string `json:"started_at"`
	Duration   string `json:"duration,omitempty"`
	// ModelUsage is what the attempt's model calls cost (`task status`).
	ModelUsage *usageView `json:"model_usage,omitempty"`
}

func attemptJSON(a *apipb.Attempt) attemptView {
	v := attemptView{
		Number: a.GetNumber(), RunID: a.GetRunId(), Status: a.GetStatus(), Outcome: a.GetOutcome(), Reason: a.GetReason(),
		Message: a.GetMessage(), Summary: a.GetSummary(), StderrTail: a.GetStderrTail(), Started: rfc3339Always(a.GetStartedUnixNano()),
	}
	switch {
	case a.GetExitSignal() != "":
		v.Exit = "signal " + a.GetExitSignal()
	case a.GetExitCode() >= 0 && a.GetStatus() == string(store.AttemptInterrupted):
		v.Exit = fmt.Sprintf("exit %d", a.GetExitCode())
	}
	if end := a.GetEndedUnixNano(); end != 0 {
		v.Duration = time.Duration(end - a.GetStartedUnixNano()).Round(time.Millisecond).String()
	}
	return v
}

// truncateLine fits s in n characters for a terminal, marking a cut with "…".
func truncateLine(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return text.TruncateRunes(s, n-1) + "…"
}

// ledgerEffectView is one row of a task's effect ledger in `inspect
// --effects --json`: what the conformance kit counts to tell an effect that
// ran twice from one replayed. It holds no argument value: the summary
// names the tool and its arguments' sizes, the fingerprint is a digest.
type ledgerEffectView struct {
	Attempt        int64  `json:"attempt"`
	Seq            int64  `json:"seq"`
	Kind           string `json:"kind"`
	Status         string `json:"status"`
	Summary        string `json:"summary"`
	Fingerprint    string `json:"fingerprint"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Replayed       bool   `json:"replayed"`
	Resolution     string `json:"resolution,omitempty"`
	ResolvedBy     string `json:"resolved_by,omitempty"`
}

func ledgerJSON(effs []store.Effect) []ledgerEffectView {
	out := make([]ledgerEffectView, 0, len(effs))
	for _, e := range effs {
		out = append(out, ledgerEffectView{
			Attempt: e.Attempt, Seq: e.Seq, Kind: string(e.Kind), Status: string(e.Status), Summary: e.Summary,
			Fingerprint: e.Fingerprint, IdempotencyKey: e.IdempotencyKey, Replayed: e.Replayed,
			Resolution: string(e.Resolution), ResolvedBy: e.ResolvedBy,
		})
	}
	return out
}

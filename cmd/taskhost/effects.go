package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// effectView is an unsettled effect in --json output.
type effectView struct {
	Attempt    int64  `json:"attempt"`
	Seq        int64  `json:"seq"`
	Status     string `json:"status"`
	Summary    string `json:"summary"`
	Resolution string `json:"resolution"`
	ResolvedBy string `json:"resolved_by,omitempty"`
	ResolvedAt string `json:"resolved_at,omitempty"`
}

func effectJSON(e *apipb.UnsettledEffect) effectView {
	v := effectView{Attempt: e.GetAttempt(), Seq: e.GetSeq(), Status: e.GetStatus(), Summary: e.GetSummary(),
		Resolution: e.GetResolution(), ResolvedBy: e.GetResolvedBy()}
	if ns := e.GetResolvedUnixNano(); ns != 0 {
		v.ResolvedAt = time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	}
	return v
}

func effectsJSON(effs []*apipb.UnsettledEffect) []effectView {
	out := make([]effectView, 0, len(effs))
	for _, e := range effs {
		out = append(out, effectJSON(e))
	}
	return out
}

// writeUnsettled is task status's table of the effects that may already
// have run once, and how to resolve the ones still unsettled.
func writeUnsettled(w io.Writer, id string, effs []*apipb.UnsettledEffect) {
	if len(effs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nEFFECT\tSTATUS\tRESOLUTION\tBY\tCALL")
	open := 0
	for _, e := range effs {
		if e.GetResolution() == "unsettled" {
			open++
		}
		fmt.Fprintf(tw, "%d/%d\t%s\t%s\t%s\t%s\n", e.GetAttempt(), e.GetSeq(), e.GetStatus(), e.GetResolution(),
			truncateLine(e.GetResolvedBy(), 40), truncateLine(printable(e.GetSummary()), 60))
	}
	tw.Flush()
	if open > 0 {
		fmt.Fprintf(w, "\n%d tool call(s) may already have run once; the host refuses to run them again until resolved:\n"+
			"  taskhost task resolve-effect %s ATTEMPT/SEQ --retry|--abandon\n", open, id)
	}
}

// parseEffectKey reads ATTEMPT/SEQ.
func parseEffectKey(s string) (attempt, seq int64, err error) {
	a, q, ok := strings.Cut(s, "/")
	if ok {
		attempt, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			seq, err = strconv.ParseInt(q, 10, 64)
		}
	}
	if !ok || err != nil || attempt < 1 || seq < 1 {
		return 0, 0, fmt.Errorf("effect %q: want ATTEMPT/SEQ, two positive numbers as task status shows them (e.g. 1/1)", truncateLine(s, 40))
	}
	return attempt, seq, nil
}

func taskResolveEffectCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task resolve-effect", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	retry := fs.Bool("retry", false, "authorize the executor's re-issue of the call to run again")
	abandon := fs.Bool("abandon", false, "give the effect up: a re-issue is then a new call under its tool's policy")
	fs.Usage = usageFunc(fs, "taskhost task resolve-effect ID ATTEMPT/SEQ (--retry | --abandon) [flags]",
		"Resolves a tool call of the task that may already have run once (an unsettled\neffect, listed by 'taskhost task status'): until it is resolved the host refuses\nto run the call again. An effect that is not unsettled is refused (exit 4).")
	pos, code, ok := parseArgs(e, fs, args, 2, 2)
	if !ok {
		return code
	}
	if *retry == *abandon {
		return cf.fail(e, usageError("task resolve-effect: give one of --retry or --abandon"))
	}
	attempt, seq, err := parseEffectKey(pos[1])
	if err != nil {
		return cf.fail(e, usageError("task resolve-effect: "+err.Error()))
	}
	to := "abandoned"
	if *retry {
		to = "retry_authorized"
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := tc.ResolveEffect(cctx, &apipb.ResolveEffectRequest{TaskId: pos[0], Attempt: attempt, Seq: seq, Resolution: to})
	if err != nil {
		return cf.fail(e, err)
	}
	if cf.json {
		newPrinter(e, true).emit(map[string]any{"task_id": pos[0], "effect": effectJSON(resp.Effect)})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "effect %d/%d of task %s is %s\n", attempt, seq, pos[0], resp.Effect.GetResolution())
	return exitOK
}

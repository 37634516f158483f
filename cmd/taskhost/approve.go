package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/store"
)

// decider answers the approvals of a foreground task: by flag, or by asking
// at the terminal (y/N; anything else, or end of input, rejects).
type decider struct {
	e                     *env
	approveAll, rejectAll bool
	in                    *bufio.Reader
}

func (d *decider) decide(ctx context.Context, h *host.Host, principal, taskID string) {
	pending, err := h.Runner.Approvals(ctx, principal, store.ApprovalPending)
	if err != nil {
		errorf(d.e, "approvals: %v", err)
		return
	}
	for _, a := range pending {
		if a.TaskID != taskID {
			continue
		}
		what := a.Prompt
		if a.Tool != "" {
			what = "tool " + a.Tool + ": " + a.Prompt
		}
		approve := d.approveAll
		switch {
		case d.approveAll:
			fmt.Fprintf(d.e.stderr, "approval %s: %s — approved automatically (--approve-all)\n", a.ID, what)
		case d.rejectAll:
			fmt.Fprintf(d.e.stderr, "approval %s: %s — rejected automatically (--reject-all)\n", a.ID, what)
		default:
			approve = d.ask(fmt.Sprintf("approval %s: %s\nApprove? [y/N] ", a.ID, what))
		}
		if approve {
			_, err = h.Runner.Approve(ctx, principal, a.ID)
		} else {
			_, err = h.Runner.Reject(ctx, principal, a.ID)
		}
		if err != nil && !errors.Is(err, store.ErrConflict) {
			errorf(d.e, "approval %s: %v", a.ID, err)
		}
	}
}

func (d *decider) ask(prompt string) bool { return askYesNo(d.e, &d.in, prompt) }

// askYesNo asks prompt on stderr and reads the answer from stdin: "y" or
// "yes" approves; anything else, or the end of input, rejects. *in is
// created on first use and kept, so buffered input is not lost between
// questions.
func askYesNo(e *env, in **bufio.Reader, prompt string) bool {
	if *in == nil {
		*in = bufio.NewReader(e.stdin)
	}
	fmt.Fprint(e.stderr, prompt)
	line, err := (*in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(e.stderr, "(no answer: rejected)")
		return false
	}
	ans := strings.ToLower(strings.TrimSpace(line))
	return ans == "y" || ans == "yes"
}

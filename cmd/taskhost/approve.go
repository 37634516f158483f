package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/tools"
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
		what := approvalText(a.Tool, a.Prompt)
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

// maxApprovalText bounds an approval's prompt as a terminal shows it; the
// host keeps a tool's arguments shorter (tools.MaxDescribeBytes) and an
// executor's prompt at 500 characters.
const maxApprovalText = 2000

// approvalText is what an approver reads: the tool and what it would do
// (for shell.run, the command), or an executor's own prompt. The host
// escapes both; escaping again here keeps a terminal safe from an older or
// foreign daemon.
func approvalText(tool, prompt string) string {
	what := tools.Printable(prompt, maxApprovalText)
	if tool == "" {
		return what
	}
	return tools.Printable(tool, 64) + ": " + what
}

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

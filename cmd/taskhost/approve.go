package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// decider is the one approval decider of a task a command drives itself
// (taskhost run, the demo): it answers the task's approvals through the
// API, by flag (with a notice), or by asking at the terminal (y/N;
// anything else, or end of input, rejects).
type decider struct {
	e                     *env
	ac                    apipb.ApprovalServiceClient
	approveAll, rejectAll bool
	// notice, when set, is what says that approveAll approved an
	// approval (the demo's words); nil: the run's line on stderr.
	notice func(id, what string)
	// inputs, when set, answers the task's input questions (run
	// --input-values); nil leaves them to the other flags or the prompt.
	inputs *inputScript
	in     prompter
}

// decide answers taskID's pending approvals and returns how many it
// approved. When ctx ends (Ctrl-C) while it asks, it returns at once and
// leaves the approval to the host's stop, which cancels it.
func (d *decider) decide(ctx context.Context, taskID string) int {
	bg := context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(bg, callTimeout)
	resp, err := d.ac.ListApprovals(cctx, &apipb.ListApprovalsRequest{Status: string(store.ApprovalPending)})
	cancel()
	if err != nil {
		errorf(d.e, "approvals: %v", status.Convert(err).Message())
		return 0
	}
	approved := 0
	for _, a := range resp.Approvals {
		if a.TaskId != taskID {
			continue
		}
		if d.inputs != nil && a.Kind == host.ApprovalKindInput {
			d.answer(bg, a)
			continue
		}
		what := approvalText(a.Tool, a.Prompt)
		approve := d.approveAll
		switch {
		case d.approveAll && d.notice != nil:
			d.notice(a.Id, what)
		case d.approveAll:
			fmt.Fprintf(d.e.stderr, "approval %s: %s — approved automatically (--approve-all)\n", a.Id, what)
		case d.rejectAll:
			fmt.Fprintf(d.e.stderr, "approval %s: %s — rejected automatically (--reject-all)\n", a.Id, what)
		default:
			var answered bool
			if approve, answered = askYesNo(ctx, d.e, &d.in, fmt.Sprintf("approval %s: %s\nApprove? [y/N] ", a.Id, what)); !answered {
				return approved
			}
		}
		if d.resolve(bg, a.Id, approve, "") && approve {
			approved++
		}
	}
	return approved
}

// resolve approves approval id (with value, an input's answer, when not
// empty) or rejects it. One already resolved (a conflict: it expired, or
// the task ended) is no failure of the decider's.
func (d *decider) resolve(ctx context.Context, id string, approve bool, value string) bool {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req := &apipb.ResolveApprovalRequest{ApprovalId: id, ValueJson: value}
	var err error
	if approve {
		_, err = d.ac.Approve(cctx, req)
	} else {
		_, err = d.ac.Reject(cctx, req)
	}
	if err != nil && status.Code(err) != codes.FailedPrecondition {
		errorf(d.e, "approval %s: %s", id, status.Convert(err).Message())
	}
	return err == nil
}

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

// prompter reads answers from stdin without blocking past a context: a
// read that is cut short by Ctrl-C stays pending, and its line goes to the
// next question.
type prompter struct {
	in      *bufio.Reader
	lines   chan lineRead
	pending bool
}

type lineRead struct {
	line string
	err  error
}

func (p *prompter) readLine(ctx context.Context, r io.Reader) (string, error) {
	if p.lines == nil {
		p.in, p.lines = bufio.NewReader(r), make(chan lineRead, 1)
	}
	if !p.pending {
		p.pending = true
		go func() {
			line, err := p.in.ReadString('\n')
			p.lines <- lineRead{line, err}
		}()
	}
	select {
	case l := <-p.lines:
		p.pending = false
		return l.line, l.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// askYesNo asks prompt on stderr and reads the answer from stdin: "y" or
// "yes" approves; anything else, or the end of input, rejects. answered is
// false when ctx ended first (Ctrl-C, SIGTERM): nothing was decided.
func askYesNo(ctx context.Context, e *env, p *prompter, prompt string) (yes, answered bool) {
	fmt.Fprint(e.stderr, prompt)
	line, err := p.readLine(ctx, e.stdin)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(e.stderr, "(interrupted: nothing decided)")
		return false, false
	case err != nil && line == "":
		fmt.Fprintln(e.stderr, "(no answer: rejected)")
		return false, true
	}
	ans := strings.ToLower(strings.TrimSpace(line))
	return ans == "y" || ans == "yes", true
}

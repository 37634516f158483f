package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

func approvalsCmd(ctx context.Context, e *env, args []string) int {
	subs := []command{{"list", "list your approvals (pending by default)", approvalsListCmd}}
	return subcommand(e, "approvals", subs, args, func(c command, rest []string) int { return c.run(ctx, e, rest) })
}

func approvalsListCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("approvals list", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	st := fs.String("status", "pending", "pending, approved, rejected, expired, cancelled, or all")
	fs.Usage = usageFunc(fs, "taskhost approvals list [--status S] [flags]",
		"Lists your approvals, oldest first. Answer one with 'taskhost approve ID' or\n'taskhost reject ID'; a question (WHAT starts with '(input)') with\n'taskhost approve ID --value JSON'.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	filter := *st
	if filter == "all" {
		filter = ""
	}
	conn, err := cf.dial()
	if err != nil {
		return cf.fail(e, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := apipb.NewApprovalServiceClient(conn).ListApprovals(cctx, &apipb.ListApprovalsRequest{Status: filter})
	if err != nil {
		return cf.fail(e, err)
	}
	if cf.json {
		newPrinter(e, true).emit(approvalListJSON(resp))
		return exitOK
	}
	if len(resp.Approvals) == 0 {
		fmt.Fprintf(e.stderr, "no %s approvals\n", *st)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	// What would run comes last and whole (the host bounds it): an
	// approver must not decide on a cut command.
	fmt.Fprintln(tw, "ID\tTASK\tATTEMPT\tSTATUS\tEXPIRES\tWHAT")
	for _, a := range resp.Approvals {
		tool := a.Tool
		if a.Kind == "input" {
			tool = "(input)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", a.Id, a.TaskId, a.Attempt, a.Status,
			localTime(a.ExpiresUnixNano), approvalText(tool, a.Prompt))
	}
	tw.Flush()
	if resp.Truncated {
		fmt.Fprintln(e.stderr, "(more approvals not shown)")
	}
	return exitOK
}

func approveCmd(ctx context.Context, e *env, args []string) int {
	return resolveCmd(ctx, e, args, "approve", "Approves a pending approval: the task runs on and the gated effect proceeds.\nAn executor's question (kind input) is answered with --value JSON, one JSON\nvalue of at most 64 KiB (without it, the answer is null). --for-task also\nallows, for the rest of the task, the same call again (same tool and\narguments), or with --pattern GLOB the same tool's calls whose\ncommand/arguments match it ('*' any run of\ncharacters, '?' one; at most 256 bytes).")
}

func rejectCmd(ctx context.Context, e *env, args []string) int {
	return resolveCmd(ctx, e, args, "reject", "Rejects a pending approval: the gated effect never runs and the task fails\n(approval_rejected).")
}

func resolveCmd(ctx context.Context, e *env, args []string, verb, description string) int {
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	var value, pattern *string
	var forTask *bool
	if verb == "approve" {
		value = fs.String("value", "", "the answer to a question (kind input): one JSON value, e.g. '{\"x\":1}'")
		forTask = fs.Bool("for-task", false, "also allow the same tool's matching calls for the rest of the task (a tool call's approval only)")
		pattern = fs.String("pattern", "", "with --for-task: the glob the calls' command/arguments must match ('*', '?'); default: the same as this call's")
	}
	fs.Usage = usageFunc(fs, "taskhost "+verb+" ID [flags]", description+"\nAn approval already resolved, or of a cancelled task, is a conflict (exit 4).")
	pos, code, ok := parseArgs(e, fs, args, 1, 1)
	if !ok {
		return code
	}
	conn, err := cf.dial()
	if err != nil {
		return cf.fail(e, err)
	}
	defer conn.Close()
	req := &apipb.ResolveApprovalRequest{ApprovalId: pos[0]}
	if value != nil {
		req.ValueJson, req.ForTask, req.Pattern = *value, *forTask, *pattern
		if req.Pattern != "" && !req.ForTask {
			return cf.fail(e, usageError("approve: --pattern needs --for-task"))
		}
	}
	a, err := resolveApproval(ctx, apipb.NewApprovalServiceClient(conn), verb == "approve", req)
	if err != nil {
		return cf.fail(e, err)
	}
	if cf.json {
		newPrinter(e, true).emit(map[string]any{"approval": approvalJSON(a)})
		return exitOK
	}
	scope := ""
	if a.Scope == "task" {
		scope = " for the rest of the task"
		if p := a.Pattern; p != "" {
			scope += ", calls of " + a.Tool + " matching " + tools.Printable(p, 256)
		}
	}
	fmt.Fprintf(e.stdout, "approval %s %s%s (task %s)\n", a.Id, a.Status, scope, a.TaskId)
	return exitOK
}

// resolveApproval approves (with req's value, the answer to a question,
// and its tier) or rejects req's approval.
func resolveApproval(ctx context.Context, ac apipb.ApprovalServiceClient, approve bool, req *apipb.ResolveApprovalRequest) (*apipb.Approval, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var resp *apipb.ResolveApprovalResponse
	var err error
	if approve {
		resp, err = ac.Approve(cctx, req)
	} else {
		resp, err = ac.Reject(cctx, req)
	}
	return resp.GetApproval(), err
}

// approvalListJSON is the --json shape of `approvals list`.
func approvalListJSON(resp *apipb.ListApprovalsResponse) map[string]any {
	views := make([]approvalView, 0, len(resp.Approvals))
	for _, a := range resp.Approvals {
		views = append(views, approvalJSON(a))
	}
	return map[string]any{"approvals": views, "truncated": resp.Truncated}
}

package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/api"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// maxControlCalls bounds the ControlTasks calls one bulk command makes
// (each acts on at most 1000 tasks).
const maxControlCalls = 100

func taskPauseCmd(ctx context.Context, e *env, args []string) int {
	if bulkArgs(args) {
		return controlAllCmd(ctx, e, args, "pause")
	}
	return taskChange(ctx, e, args, "pause", "Pauses a task: a running or waiting one is stopped as a cancel stops it, a\nqueued one leaves the queue; it becomes interrupted (user_pause) and goes on\nonly when you resume it. Pausing an interrupted task is a no-op; a finished\ntask cannot be paused (exit 4). With --all (and no ID) pauses every pending,\nrunning or waiting task of yours; an admin adds --all-principals for everyone's.", pauseTask)
}

// bulkArgs reports whether args ask for a bulk act (--all or
// --all-principals) rather than one task's.
func bulkArgs(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "all" || name == "all-principals") {
			return true
		}
		if a == "--" {
			return false
		}
	}
	return false
}

// controlFailureView is the JSON shape of a task a bulk act left alone.
type controlFailureView struct {
	TaskID    string `json:"task_id"`
	Principal string `json:"principal"`
	Reason    string `json:"reason,omitempty"`
	Error     string `json:"error"`
}

// controlAllCmd is `task cancel|pause|resume --all [--all-principals]`.
func controlAllCmd(ctx context.Context, e *env, args []string, action string) int {
	fs := flag.NewFlagSet("task "+action, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	all := fs.Bool("all", false, "every task of yours it applies to")
	everyone := fs.Bool("all-principals", false, "with --all: every principal's tasks (admins only: [api] admins); each act is recorded in the task's events")
	what := map[string]string{
		"cancel": "Cancels every pending, running, waiting or interrupted task of yours (reason\nuser_stop_all).",
		"pause":  "Pauses every pending, running or waiting task of yours (interrupted,\nuser_pause).",
		"resume": "Resumes every interrupted task of yours, oldest first: with no free slot\neach joins the queue.",
	}[action]
	fs.Usage = usageFunc(fs, "taskhost task "+action+" --all [--all-principals] [flags]",
		what+" A task that cannot be acted on is reported on stderr and the rest go\non. Exit 0 when every one was, else the exit code of the first failure.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	if !*all {
		return cf.fail(e, usageError("task "+action+": --all-principals needs --all"))
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	done := []taskView{}
	failed := []controlFailureView{}
	code := exitOK
	for range maxControlCalls {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := tc.ControlTasks(cctx, &apipb.ControlTasksRequest{Action: action, AllPrincipals: *everyone})
		cancel()
		if err != nil {
			return cf.fail(e, err)
		}
		for _, pt := range resp.Tasks {
			done = append(done, taskJSON(pt))
			if !cf.json {
				fmt.Fprintf(e.stdout, "task %s %s (run %d)\n", pt.Id, pt.Status, pt.RunId)
			}
		}
		for _, f := range resp.Failures {
			failed = append(failed, controlFailureView{TaskID: f.TaskId, Principal: f.Principal, Reason: f.Reason, Error: f.Message})
			if code == exitOK {
				code = exitCodeForStatus(failureStatus(f))
			}
			if !cf.json {
				errorf(e, "task %s: %s", f.TaskId, f.Message)
			}
		}
		// Acted-on tasks no longer match; one that failed still may.
		if !resp.More || len(resp.Tasks) == 0 {
			break
		}
	}
	if cf.json {
		newPrinter(e, true).emit(map[string]any{"action": action, "tasks": done, "failed": failed})
	} else if len(done)+len(failed) == 0 {
		fmt.Fprintf(e.stderr, "no tasks to %s\n", action)
	}
	return code
}

// failureStatus is the status the act on f's task alone would have got.
func failureStatus(f *apipb.ControlFailure) error {
	st := status.New(codes.Code(f.Code), f.Message)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: f.Reason, Domain: api.ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

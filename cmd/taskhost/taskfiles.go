package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// fileView is the JSON shape of one workspace entry.
type fileView struct {
	Path     string `json:"path"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	Modified string `json:"modified,omitempty"`
}

func taskFilesCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task files", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	out := fs.String("o", "", "write the file to this new file instead of stdout (refused if it exists)")
	list := fs.Bool("list", false, "list the directory PATH instead of reading a file")
	fs.Usage = usageFunc(fs, "taskhost task files ID [PATH] [-o FILE] [--list] [flags]",
		"Gets results out of one of your tasks' workspace. Without PATH (or with --list)\nlists the workspace (or directory PATH): every entry below it, symlinks shown\nbut not followed, at most 10000 entries (a cut list says so). With PATH writes\nthat regular file to stdout, or to -o FILE. Symlinks and paths leading out\nof the workspace are refused (exit 2); a file above the daemon's export limit\n(1 GiB) is refused (exit 4).")
	pos, code, ok := parseArgs(e, fs, args, 1, 2)
	if !ok {
		return code
	}
	path := ""
	if len(pos) == 2 {
		path = pos[1]
	}
	if *out != "" && (path == "" || *list) {
		return cf.fail(e, usageError("task files: -o needs the PATH of a file to read"))
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	if path == "" || *list {
		return listTaskFiles(ctx, e, &cf, tc, pos[0], path)
	}
	if err := readTaskFile(ctx, e, tc, pos[0], path, *out); err != nil {
		return cf.fail(e, err)
	}
	return exitOK
}

func listTaskFiles(ctx context.Context, e *env, cf *clientFlags, tc apipb.TaskServiceClient, id, dir string) int {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := tc.ListTaskFiles(cctx, &apipb.ListTaskFilesRequest{TaskId: id, Path: dir})
	if err != nil {
		return cf.fail(e, err)
	}
	views := fileViews(resp)
	if cf.json {
		newPrinter(e, true).emit(map[string]any{"files": views, "truncated": resp.Truncated})
		return exitOK
	}
	if len(views) == 0 {
		fmt.Fprintf(e.stderr, "task %s: no files\n", id)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSIZE\tMODIFIED\tPATH")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", v.Type, v.Size, v.Modified, quoteIfNeeded(v.Path))
	}
	tw.Flush()
	if resp.Truncated {
		fmt.Fprintf(e.stderr, "the list is cut at %d entries: list a subdirectory with --list PATH\n", len(views))
	}
	return exitOK
}

// fileViews is a workspace listing in its JSON shape.
func fileViews(resp *apipb.ListTaskFilesResponse) []fileView {
	views := make([]fileView, 0, len(resp.Files))
	for _, f := range resp.Files {
		v := fileView{Path: f.Path, Type: f.Type, Size: f.Size}
		if f.ModifiedUnixNano != 0 {
			v.Modified = time.Unix(0, f.ModifiedUnixNano).UTC().Format(time.RFC3339)
		}
		views = append(views, v)
	}
	return views
}

// quoteIfNeeded shows a path a task wrote as is, unless it holds bytes a
// terminal would act on.
func quoteIfNeeded(p string) string {
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}

// readTaskFile streams a file of the task's workspace to stdout or to a
// new file out. A file is written under a temporary name beside out and
// renamed once every byte announced has arrived, so out never holds half a
// file.
func readTaskFile(ctx context.Context, e *env, tc apipb.TaskServiceClient, id, path, out string) (err error) {
	var w io.Writer = e.stdout
	if out != "" {
		if _, err := os.Lstat(out); err == nil {
			return usageError(fmt.Sprintf("task files: -o %s already exists: choose a new name or remove it", out))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return usageError(fmt.Sprintf("task files: -o %s: %v", out, err))
		}
		tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".partial-*")
		if err != nil {
			return usageError(fmt.Sprintf("task files: -o %s: %v", out, err))
		}
		defer func() {
			if cerr := tmp.Close(); err == nil && cerr != nil {
				err = cerr
			}
			if err == nil {
				// Link, not rename: a file created at out meanwhile is not
				// overwritten.
				if err = os.Link(tmp.Name(), out); err != nil {
					err = fmt.Errorf("task files: -o %s: %w", out, err)
				}
			}
			os.Remove(tmp.Name())
		}()
		w = tmp
	}
	// No overall deadline: a large file takes as long as it takes; Ctrl-C
	// cancels ctx.
	size, err := receiveTaskFile(ctx, tc, id, path, 0, w)
	if err != nil {
		return err
	}
	if out != "" {
		fmt.Fprintf(e.stderr, "wrote %s (%d bytes)\n", out, size)
	}
	return nil
}

// fileTooLargeError is a file above a reader's own bound.
type fileTooLargeError struct {
	path        string
	size, limit int64
}

func (f *fileTooLargeError) Error() string {
	return fmt.Sprintf("%s is %d bytes, the limit is %d", f.path, f.size, f.limit)
}

// receiveTaskFile streams the file path of task id's workspace to w and
// returns its size. limit > 0 refuses, before reading, a file larger than
// limit bytes (*fileTooLargeError).
func receiveTaskFile(ctx context.Context, tc apipb.TaskServiceClient, id, path string, limit int64, w io.Writer) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends a stream left early
	stream, err := tc.ReadTaskFile(ctx, &apipb.ReadTaskFileRequest{TaskId: id, Path: path})
	if err != nil {
		return 0, err
	}
	first, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	size := first.Size
	if limit > 0 && size > limit {
		return 0, &fileTooLargeError{path: path, size: size, limit: limit}
	}
	var got int64
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		if got+int64(len(msg.Data)) > size {
			return 0, fmt.Errorf("task files: the daemon sent more than the %d bytes it announced", size)
		}
		if _, err := w.Write(msg.Data); err != nil {
			return 0, fmt.Errorf("task files: writing: %w", err)
		}
		got += int64(len(msg.Data))
	}
	if got != size {
		return 0, fmt.Errorf("task files: %s shrank while it was read: got %d of %d bytes", path, got, size)
	}
	return size, nil
}

func taskDeleteCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task delete", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	fs.Usage = usageFunc(fs, "taskhost task delete ID [flags]",
		"Deletes a completed, failed or cancelled task of yours: its record, attempts,\nevents, effects and approvals, then its workspace. A task that is pending,\nrunning, waiting for an approval or interrupted is refused (exit 4): cancel it\nfirst. Get its files out first with 'taskhost task files'.")
	pos, code, ok := parseArgs(e, fs, args, 1, 1)
	if !ok {
		return code
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := tc.DeleteTask(cctx, &apipb.DeleteTaskRequest{TaskId: pos[0]}); err != nil {
		return cf.fail(e, err)
	}
	if cf.json {
		newPrinter(e, true).emit(map[string]any{"deleted": pos[0]})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "deleted task %s\n", pos[0])
	return exitOK
}

// writePrincipalTaskTable is the task table with each task's principal,
// for an admin's 'task list --all'.
func writePrincipalTaskTable(w io.Writer, tasks []*apipb.Task) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPRINCIPAL\tEXECUTOR\tSTATUS\tREASON\tRUN\tSTEPS\tCREATED")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.GetId(), quoteIfNeeded(t.GetPrincipal()), t.GetExecutor(), queuedStatus(t), t.GetReason(), t.GetRunId(),
			meter(t.GetBudgets().GetSteps()), localTime(t.GetCreatedUnixNano()))
	}
	tw.Flush()
}

func taskCpCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task cp", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	fs.Usage = usageFunc(fs, "taskhost task cp ID:PATH DEST [flags]",
		"Copies the file PATH of one of your tasks' workspace to DEST: a new file, an\nexisting directory (the file keeps its name there), or - for stdout. The same\nas 'taskhost task files ID PATH -o DEST'.")
	pos, code, ok := parseArgs(e, fs, args, 2, 2)
	if !ok {
		return code
	}
	id, path, found := strings.Cut(pos[0], ":")
	if !found || id == "" || path == "" {
		return cf.fail(e, usageError(fmt.Sprintf("task cp: %q is not ID:PATH, e.g. t_abc:notes.md", pos[0])))
	}
	dest := pos[1]
	if dest == "-" {
		dest = ""
	} else if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		dest = filepath.Join(dest, filepath.Base(filepath.FromSlash(path)))
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	if err := readTaskFile(ctx, e, tc, id, path, dest); err != nil {
		return cf.fail(e, err)
	}
	return exitOK
}

// maxResumeAll bounds the interrupted tasks one 'task resume
// --all-interrupted' looks at.
const maxResumeAll = 10000

// resumeAllInterrupted resumes every interrupted task of the caller (or,
// with --all, of every principal: admins only), one call each, and goes on
// past a task it cannot resume.
func resumeAllInterrupted(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("task resume", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	allInterrupted := fs.Bool("all-interrupted", false, "resume every interrupted task of yours")
	everyone := fs.Bool("all", false, "with --all-interrupted: every principal's (admins only)")
	fs.Usage = usageFunc(fs, "taskhost task resume --all-interrupted [--all] [flags]",
		"Resumes every interrupted task of yours (with --all, as an admin, everyone's),\nat most 10000, oldest first; a task that cannot be resumed (e.g. the daemon is\nbusy) is reported and the rest are tried. Exit 0 when all resumed, else the\nexit code of the first failure.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	if !*allInterrupted {
		return cf.fail(e, usageError("task resume: give a task ID, or --all-interrupted"))
	}
	tc, closeConn, err := cf.tasks()
	if err != nil {
		return cf.fail(e, err)
	}
	defer closeConn()
	var ids []string
	token := ""
	for len(ids) < maxResumeAll {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := tc.ListTasks(cctx, &apipb.ListTasksRequest{Status: []string{"interrupted"}, PageSize: 500, PageToken: token, All: *everyone})
		cancel()
		if err != nil {
			return cf.fail(e, err)
		}
		for _, t := range resp.Tasks {
			ids = append(ids, t.Id)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	ids = ids[:min(len(ids), maxResumeAll)]
	type failure struct {
		TaskID string `json:"task_id"`
		Error  string `json:"error"`
	}
	resumed := []taskView{}
	failed := []failure{}
	code := exitOK
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := tc.ResumeTask(cctx, &apipb.ResumeTaskRequest{TaskId: id})
		cancel()
		if err != nil {
			if code == exitOK {
				code = exitCodeForStatus(err)
			}
			msg := err.Error()
			if st, ok := status.FromError(err); ok {
				msg = st.Message()
			}
			failed = append(failed, failure{id, msg})
			if !cf.json {
				errorf(e, "task %s: %s", id, msg)
			}
			continue
		}
		t := resp.Task
		resumed = append(resumed, taskJSON(t))
		if !cf.json {
			fmt.Fprintf(e.stdout, "task %s %s (run %d)\n", t.Id, t.Status, t.RunId)
		}
	}
	if cf.json {
		newPrinter(e, true).emit(map[string]any{"resumed": resumed, "failed": failed})
	} else if len(ids) == 0 {
		fmt.Fprintln(e.stderr, "no interrupted tasks")
	}
	return code
}

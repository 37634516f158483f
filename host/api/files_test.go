package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// exportLimit is the test server's file limit: above one chunk, so that
// a file at the limit takes several messages.
const exportLimit = 2*exportChunkBytes + 5

func filesServer(t *testing.T) (*testServer, string) {
	t.Helper()
	root := t.TempDir()
	ts := startServer(t, func(o *Options) {
		o.WorkspaceRoot = root
		o.MaxExportFileBytes = exportLimit
	})
	ts.fake.add(self, "t_mine", store.StatusCompleted)
	ts.fake.add(tokenUser, "t_theirs", store.StatusCompleted)
	ws := filepath.Join(root, "t_mine")
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"at_limit.bin": exportLimit, "past_limit.bin": exportLimit + 1, "sub/notes.md": 6, "empty": 0} {
		data := bytes.Repeat([]byte{byte(len(name))}, size)
		if err := os.WriteFile(filepath.Join(ws, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "passwd")); err != nil {
		t.Fatal(err)
	}
	return ts, ws
}

// readAll reads a file through ReadTaskFile and checks the chunk bound.
func readAll(t *testing.T, tc apipb.TaskServiceClient, id, path string) ([]byte, int64, error) {
	t.Helper()
	stream, err := tc.ReadTaskFile(ctxT(t), &apipb.ReadTaskFileRequest{TaskId: id, Path: path})
	if err != nil {
		return nil, 0, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, 0, err
	}
	var buf bytes.Buffer
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), first.Size, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if len(msg.Data) > exportChunkBytes || msg.Size != 0 {
			t.Fatalf("a chunk of %d bytes (size %d): want at most %d and no size", len(msg.Data), msg.Size, exportChunkBytes)
		}
		buf.Write(msg.Data)
	}
}

func TestReadTaskFile(t *testing.T) {
	ts, ws := filesServer(t)
	mine := apipb.NewTaskServiceClient(ts.unixConn(t))
	theirs := apipb.NewTaskServiceClient(ts.tokenConn(t, goodToken))

	for _, name := range []string{"at_limit.bin", "sub/notes.md", "empty"} {
		want, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		got, size, err := readAll(t, mine, "t_mine", name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, want) || size != int64(len(want)) {
			t.Fatalf("%s: got %d bytes (size %d), want %d", name, len(got), size, len(want))
		}
	}

	for _, tc := range []struct {
		name     string
		client   apipb.TaskServiceClient
		id, path string
		code     codes.Code
		reason   string
		msg      string
	}{
		{"past the limit", mine, "t_mine", "past_limit.bin", codes.FailedPrecondition, ReasonFileTooLarge, fmt.Sprintf("is %d bytes; the daemon sends files of at most %d", exportLimit+1, exportLimit)},
		{"a symlink", mine, "t_mine", "passwd", codes.InvalidArgument, ReasonInvalidArgument, "is a symlink"},
		{"out of the workspace", mine, "t_mine", "../t_theirs/x", codes.InvalidArgument, ReasonInvalidArgument, `".." segment`},
		{"a directory", mine, "t_mine", "sub", codes.InvalidArgument, ReasonInvalidArgument, "is a directory"},
		{"a missing file", mine, "t_mine", "nope", codes.NotFound, ReasonNotFound, "not found"},
		{"another principal's task", theirs, "t_mine", "sub/notes.md", codes.NotFound, ReasonNotFound, "task t_mine not found"},
		{"a missing task", theirs, "t_zzzz", "sub/notes.md", codes.NotFound, ReasonNotFound, "task t_zzzz not found"},
		{"a bad task id", mine, "../x", "sub/notes.md", codes.InvalidArgument, ReasonInvalidArgument, "task_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readAll(t, tc.client, tc.id, tc.path)
			st := wantCode(t, err, tc.code, tc.reason)
			if !strings.Contains(st.Message(), tc.msg) {
				t.Fatalf("message %q does not say %q", st.Message(), tc.msg)
			}
		})
	}
}

func TestListTaskFiles(t *testing.T) {
	ts, _ := filesServer(t)
	mine := apipb.NewTaskServiceClient(ts.unixConn(t))
	theirs := apipb.NewTaskServiceClient(ts.tokenConn(t, goodToken))
	resp, err := mine.ListTaskFiles(ctxT(t), &apipb.ListTaskFilesRequest{TaskId: "t_mine"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range resp.Files {
		got = append(got, fmt.Sprintf("%s:%s:%d", f.Path, f.Type, f.Size))
	}
	want := fmt.Sprintf("at_limit.bin:file:%d empty:file:0 passwd:symlink:0 past_limit.bin:file:%d sub:dir:0 sub/notes.md:file:6", exportLimit, exportLimit+1)
	if strings.Join(got, " ") != want || resp.Truncated {
		t.Fatalf("list = %v (truncated %v)\nwant %s", got, resp.Truncated, want)
	}
	_, err = theirs.ListTaskFiles(ctxT(t), &apipb.ListTaskFilesRequest{TaskId: "t_mine"})
	wantCode(t, err, codes.NotFound, ReasonNotFound)
	_, err = mine.ListTaskFiles(ctxT(t), &apipb.ListTaskFilesRequest{TaskId: "t_mine", Path: "passwd"})
	wantCode(t, err, codes.InvalidArgument, ReasonInvalidArgument)
}

// fakeDeleter deletes the fake's tasks as the store does.
type fakeDeleter struct{ f *fakeTasks }

func (d fakeDeleter) Delete(_ context.Context, principal, id string) error {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	t, ok := d.f.tasks[id]
	switch {
	case !ok || t.PrincipalID != principal:
		return fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	case !t.Status.Terminal():
		return fmt.Errorf("task %s is %s: only a completed, failed or cancelled task can be deleted (cancel it first): %w", id, t.Status, store.ErrConflict)
	}
	delete(d.f.tasks, id)
	return nil
}

func TestDeleteTaskAPI(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.Deleter = fakeDeleter{o.Tasks.(*fakeTasks)} })
	ts.fake.add(self, "t_done", store.StatusCompleted)
	ts.fake.add(self, "t_running", store.StatusRunning)
	mine := apipb.NewTaskServiceClient(ts.unixConn(t))
	theirs := apipb.NewTaskServiceClient(ts.tokenConn(t, goodToken))

	_, err := theirs.DeleteTask(ctxT(t), &apipb.DeleteTaskRequest{TaskId: "t_done"})
	wantCode(t, err, codes.NotFound, ReasonNotFound)
	_, err = mine.DeleteTask(ctxT(t), &apipb.DeleteTaskRequest{TaskId: "t_running"})
	if st := wantCode(t, err, codes.FailedPrecondition, ReasonTaskConflict); !strings.Contains(st.Message(), "is running") {
		t.Fatalf("refusal %q does not name the status", st.Message())
	}
	if _, err := mine.DeleteTask(ctxT(t), &apipb.DeleteTaskRequest{TaskId: "t_done"}); err != nil {
		t.Fatal(err)
	}
	_, err = mine.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_done"})
	wantCode(t, err, codes.NotFound, ReasonNotFound)
}

// At most maxExports files are read at once: the next is refused with
// EXPORT_LIMIT, and a slot is free again once a reader goes away.
func TestReadTaskFileLimit(t *testing.T) {
	ts, _ := filesServer(t)
	mine := apipb.NewTaskServiceClient(ts.unixConn(t))
	var cancels []context.CancelFunc
	for range maxExports {
		ctx, cancel := context.WithCancel(ctxT(t))
		cancels = append(cancels, cancel)
		// A file of several chunks the client never reads: the stream
		// holds its slot, blocked on flow control.
		stream, err := mine.ReadTaskFile(ctx, &apipb.ReadTaskFileRequest{TaskId: "t_mine", Path: "at_limit.bin"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	_, _, err := readAll(t, mine, "t_mine", "sub/notes.md")
	wantCode(t, err, codes.ResourceExhausted, ReasonExportLimit)

	cancels[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := readAll(t, mine, "t_mine", "sub/notes.md")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot freed after a reader went away: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package api

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// fakeStored is a store's workspaces: the tasks it names are read from it,
// every other task from the host's copy.
type fakeStored struct {
	files map[string]map[string][]byte // task → path → content ("->" prefix: a symlink)
}

func (f fakeStored) StoredWorkspace(_ context.Context, _, id string) ([]tools.StoredFile, bool, error) {
	ws, ok := f.files[id]
	if !ok {
		return nil, false, nil
	}
	var out []tools.StoredFile
	for p, b := range ws {
		out = append(out, tools.StoredFile{Path: p, Symlink: bytes.HasPrefix(b, []byte("->")), Size: int64(len(b))})
	}
	return out, true, nil
}

func (f fakeStored) StoredWorkspaceFile(_ context.Context, _, id, path string) ([]byte, error) {
	b, ok := f.files[id][path]
	if !ok {
		return nil, fmt.Errorf("task %s: workspace file %q: %w", id, path, store.ErrNotFound)
	}
	return b, nil
}

// A task this host does not hold is listed and read as the store holds
// it, never from the host's stale copy, with the bounds and refusals of
// the host's copy; a task it holds is still read from its copy.
func TestTaskFilesFromTheStore(t *testing.T) {
	t.Parallel()
	stored := fakeStored{files: map[string]map[string][]byte{"t_moved": {
		"step1.txt":          []byte("one"),
		"dir/step2.txt":      []byte("two"),
		"dir/deep/step3.txt": []byte("three"),
		"at_limit.bin":       bytes.Repeat([]byte{1}, exportLimit),
		"past_limit.bin":     bytes.Repeat([]byte{2}, exportLimit+1),
		"link":               []byte("->/etc/passwd"),
	}}}
	root := t.TempDir()
	ts := startServer(t, func(o *Options) {
		o.WorkspaceRoot = root
		o.MaxExportFileBytes = exportLimit
		o.StoredWorkspaces = stored
	})
	ts.fake.add(self, "t_moved", store.StatusInterrupted)
	ts.fake.add(self, "t_here", store.StatusCompleted)
	for id, name := range map[string]string{"t_moved": "stale.txt", "t_here": "local.txt"} {
		if err := os.MkdirAll(filepath.Join(root, id), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, id, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mine := apipb.NewTaskServiceClient(ts.unixConn(t))
	list := func(id, path string) string {
		t.Helper()
		resp, err := mine.ListTaskFiles(ctxT(t), &apipb.ListTaskFilesRequest{TaskId: id, Path: path})
		if err != nil {
			t.Fatalf("list %s %q: %v", id, path, err)
		}
		var got []string
		for _, f := range resp.Files {
			got = append(got, fmt.Sprintf("%s:%s:%d", f.Path, f.Type, f.Size))
		}
		return strings.Join(got, " ")
	}
	want := fmt.Sprintf("at_limit.bin:file:%d dir:dir:0 dir/deep:dir:0 dir/deep/step3.txt:file:5 dir/step2.txt:file:3 link:symlink:0 past_limit.bin:file:%d step1.txt:file:3",
		exportLimit, exportLimit+1)
	if got := list("t_moved", ""); got != want {
		t.Fatalf("stored listing\n got %s\nwant %s", got, want)
	}
	if got := list("t_moved", "dir/deep"); got != "dir/deep/step3.txt:file:5" {
		t.Fatalf("stored listing of dir/deep: %s", got)
	}
	if got := list("t_here", ""); got != "local.txt:file:9" {
		t.Fatalf("a task this host holds lists %s, want its own copy", got)
	}
	for name, want := range map[string][]byte{"dir/deep/step3.txt": []byte("three"), "at_limit.bin": stored.files["t_moved"]["at_limit.bin"]} {
		got, size, err := readAll(t, mine, "t_moved", name)
		if err != nil || !bytes.Equal(got, want) || size != int64(len(want)) {
			t.Fatalf("read %s: %d bytes (size %d), %v; want %d", name, len(got), size, err, len(want))
		}
	}
	for _, tc := range []struct {
		path   string
		code   codes.Code
		reason string
		msg    string
	}{
		{"past_limit.bin", codes.FailedPrecondition, ReasonFileTooLarge, fmt.Sprintf("is %d bytes; the daemon sends files of at most %d", exportLimit+1, exportLimit)},
		{"link", codes.InvalidArgument, ReasonInvalidArgument, "is a symlink"},
		{"link/x", codes.InvalidArgument, ReasonInvalidArgument, `through the symlink "link"`},
		{"dir", codes.InvalidArgument, ReasonInvalidArgument, "is a directory"},
		{"stale.txt", codes.NotFound, ReasonNotFound, "not found"},
		{"../t_here/local.txt", codes.InvalidArgument, ReasonInvalidArgument, `".." segment`},
	} {
		_, _, err := readAll(t, mine, "t_moved", tc.path)
		if st := wantCode(t, err, tc.code, tc.reason); !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("read %s: %q does not say %q", tc.path, st.Message(), tc.msg)
		}
	}
}

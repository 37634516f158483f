package tools

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

type readOut struct {
	Content  string `json:"content"`
	Size     int64  `json:"size"`
	Encoding string `json:"encoding"`
}

type listOut struct {
	Entries   []listEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

func TestWorkspaceRoundTrip(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)

	var w struct{ Written int }
	mustCall(t, r, ToolWorkspaceWrite, map[string]any{"path": "notes/today.txt", "content": "hello"}, &w)
	if w.Written != 5 {
		t.Fatalf("written = %d, want 5", w.Written)
	}
	mustCall(t, r, ToolWorkspaceWrite, map[string]any{"path": "notes/today.txt", "content": ", world", "append": true}, &w)
	var rd readOut
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": "./notes//today.txt"}, &rd)
	if rd.Content != "hello, world" || rd.Size != 12 || rd.Encoding != "" {
		t.Fatalf("read = %+v", rd)
	}
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": "notes/today.txt", "offset": 7, "limit": 3}, &rd)
	if rd.Content != "wor" || rd.Size != 12 {
		t.Fatalf("read with offset and limit = %+v", rd)
	}
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": "notes/today.txt", "offset": 100}, &rd)
	if rd.Content != "" || rd.Size != 12 {
		t.Fatalf("read past the end = %+v", rd)
	}
	mustCall(t, r, ToolWorkspaceWrite, map[string]any{"path": "notes/today.txt", "content": "replaced"}, &w)
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": "notes/today.txt"}, &rd)
	if rd.Content != "replaced" {
		t.Fatalf("after replace: %+v", rd)
	}

	for _, a := range []map[string]any{{}, {"path": ""}, {"path": "."}} {
		var ls listOut
		mustCall(t, r, ToolWorkspaceList, a, &ls)
		if len(ls.Entries) != 1 || ls.Entries[0] != (listEntry{Name: "notes", Type: "dir"}) || ls.Truncated {
			t.Fatalf("list %v = %+v", a, ls)
		}
	}
	var ls listOut
	// No temporary file is left behind.
	mustCall(t, r, ToolWorkspaceList, map[string]any{"path": "notes"}, &ls)
	if len(ls.Entries) != 1 || ls.Entries[0] != (listEntry{Name: "today.txt", Type: "file", Size: 8}) {
		t.Fatalf("list notes = %+v", ls)
	}

	ws, _ := r.Workspace(testTask)
	for name, want := range map[string]os.FileMode{ws: 0o700, filepath.Join(ws, "notes"): 0o700, filepath.Join(ws, "notes/today.txt"): 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
}

func TestWorkspaceFailuresForTheModel(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	writeFile(t, filepath.Join(ws, "file.txt"), []byte("x"))
	if err := os.Mkdir(filepath.Join(ws, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"read missing", ToolWorkspaceRead, map[string]any{"path": "missing.txt"}, "no such file"},
		{"read directory", ToolWorkspaceRead, map[string]any{"path": "dir"}, "is a directory"},
		{"read workspace", ToolWorkspaceRead, map[string]any{"path": "."}, "is a directory"},
		{"read under a file", ToolWorkspaceRead, map[string]any{"path": "file.txt/x"}, "not a directory"},
		{"read fifo does not block", ToolWorkspaceRead, map[string]any{"path": "fifo"}, "not a regular file"},
		{"write over directory", ToolWorkspaceWrite, map[string]any{"path": "dir", "content": "x"}, "is a directory"},
		{"write over fifo", ToolWorkspaceWrite, map[string]any{"path": "fifo", "content": "x"}, "not a regular file"},
		{"write under a file", ToolWorkspaceWrite, map[string]any{"path": "file.txt/x", "content": "x"}, "not a directory"},
		{"list missing", ToolWorkspaceList, map[string]any{"path": "missing"}, "no such file"},
		{"list file", ToolWorkspaceList, map[string]any{"path": "file.txt"}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := callTool(t, t.Context(), r, tt.tool, tt.args)
			wantErrorResult(t, res, err, tt.want)
		})
	}
}

func TestWorkspaceReadBinary(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	data := []byte{0xff, 0xfe, 0, 'a'}
	writeFile(t, filepath.Join(ws, "bin"), data)
	var rd readOut
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": "bin"}, &rd)
	got, err := base64.StdEncoding.DecodeString(rd.Content)
	if rd.Encoding != "base64" || err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read = %+v (%v)", rd, err)
	}
}

// TestWorkspaceEscapes tries every way out of the workspace, for each tool,
// and checks that each is refused as a bad path and that nothing outside
// changed.
func TestWorkspaceEscapes(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	writeFile(t, secret, []byte("outside secret"))

	symlink(t, outside, filepath.Join(ws, "outdir"))                         // symlinked directory pointing out
	symlink(t, secret, filepath.Join(ws, "outfile"))                         // symlinked file pointing out
	symlink(t, "../..", filepath.Join(ws, "up"))                             // relative, climbing out
	symlink(t, filepath.Join(outside, "new"), filepath.Join(ws, "dangling")) // pointing out, to nothing yet
	writeFile(t, filepath.Join(ws, "sub", "keep"), nil)
	symlink(t, "../../secret.txt", filepath.Join(ws, "sub", "upfile"))
	symlink(t, "outfile", filepath.Join(ws, "chain")) // inside, then out
	symlink(t, "loop", filepath.Join(ws, "loop"))
	symlink(t, "/", filepath.Join(ws, "rootlink"))

	type tcase struct {
		tool string
		path string
		want string
	}
	var tests []tcase
	for _, tool := range []string{ToolWorkspaceRead, ToolWorkspaceWrite, ToolWorkspaceList} {
		for _, c := range []struct{ path, want string }{
			{"../secret.txt", `".."`},
			{"sub/../../secret.txt", `".."`},
			{"sub/../keep", `".."`}, // even one that stays inside
			{"..", `".."`},
			{secret, "absolute"},
			{"/", "absolute"},
			{"a\x00b", "NUL"},
			{"outdir", "out of the workspace"},
			{"outdir/secret.txt", "out of the workspace"},
			{"outdir/new.txt", "out of the workspace"},
			{"outfile", "out of the workspace"},
			{"up", "out of the workspace"},
			{"up/x", "out of the workspace"},
			{"dangling", "out of the workspace"},
			{"sub/upfile", "out of the workspace"},
			{"chain", "out of the workspace"},
			{"rootlink/etc/passwd", "out of the workspace"},
			{"loop", "too many levels"},
		} {
			tests = append(tests, tcase{tool, c.path, c.want})
		}
	}
	for _, tt := range tests {
		t.Run(tt.tool+"/"+strconv.Quote(tt.path), func(t *testing.T) {
			a := map[string]any{"path": tt.path}
			if tt.tool == ToolWorkspaceWrite {
				a["content"] = "overwritten"
			}
			_, err := callTool(t, t.Context(), r, tt.tool, a)
			wantArgError(t, err, "path", tt.want)
		})
	}
	t.Cleanup(func() {
		if got, _ := os.ReadFile(secret); string(got) != "outside secret" {
			t.Errorf("the file outside was changed: %q", got)
		}
		if des, _ := os.ReadDir(outside); len(des) != 1 {
			t.Errorf("files were created outside: %v", des)
		}
		if fi, err := os.Lstat(filepath.Join(ws, "outfile")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the symlink pointing out was replaced: %v", err)
		}
	})
}

// TestWorkspaceSymlinksInside: symlinks that stay inside the workspace work,
// and a write goes through one to its target.
func TestWorkspaceSymlinksInside(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	writeFile(t, filepath.Join(ws, "real.txt"), []byte("hello"))
	writeFile(t, filepath.Join(ws, "sub", "keep"), nil)
	symlink(t, "real.txt", filepath.Join(ws, "link"))
	symlink(t, "../real.txt", filepath.Join(ws, "sub", "uplink"))
	symlink(t, filepath.Join(ws, "real.txt"), filepath.Join(ws, "abslink"))
	symlink(t, "sub", filepath.Join(ws, "dirlink"))

	for _, p := range []string{"link", "sub/uplink", "abslink"} {
		var rd readOut
		mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": p}, &rd)
		if rd.Content != "hello" {
			t.Errorf("read %s = %q", p, rd.Content)
		}
	}
	mustCall(t, r, ToolWorkspaceWrite, map[string]any{"path": "link", "content": "bye"}, nil)
	if got, _ := os.ReadFile(filepath.Join(ws, "real.txt")); string(got) != "bye" {
		t.Errorf("write through link: real.txt = %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link is no longer a symlink: %v", err)
	}
	mustCall(t, r, ToolWorkspaceWrite, map[string]any{"path": "dirlink/new.txt", "content": "n"}, nil)
	var ls listOut
	mustCall(t, r, ToolWorkspaceList, map[string]any{"path": "dirlink"}, &ls)
	var names []string
	for _, e := range ls.Entries {
		names = append(names, e.Name+":"+e.Type)
	}
	if want := []string{"keep:file", "new.txt:file", "uplink:symlink"}; !slices.Equal(names, want) {
		t.Errorf("list dirlink = %v, want %v", names, want)
	}
}

func TestWorkspacePathLimit(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	// Components stay under the file system's 255-byte name limit.
	atLimit := strings.Repeat("a", 200) + "/" + strings.Repeat("b", 200) + "/" + strings.Repeat("c", 110)
	if len(atLimit) != MaxPathBytes {
		t.Fatalf("test path is %d bytes", len(atLimit))
	}
	mustCall(t, r, ToolWorkspaceWrite, map[string]any{"path": atLimit, "content": "x"}, nil)
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": atLimit}, nil)
	for _, tool := range []string{ToolWorkspaceRead, ToolWorkspaceWrite, ToolWorkspaceList} {
		a := map[string]any{"path": atLimit + "c"}
		if tool == ToolWorkspaceWrite {
			a["content"] = "x"
		}
		_, err := callTool(t, t.Context(), r, tool, a)
		wantArgError(t, err, "path", "513 bytes", "512")
	}
}

func TestWorkspaceWriteLimit(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	var w struct{ Written int }
	mustCall(t, r, ToolWorkspaceWrite, map[string]any{"path": "at", "content": strings.Repeat("x", MaxWriteBytes)}, &w)
	if w.Written != MaxWriteBytes {
		t.Fatalf("written = %d", w.Written)
	}
	_, err := callTool(t, t.Context(), r, ToolWorkspaceWrite, map[string]any{"path": "past", "content": strings.Repeat("x", MaxWriteBytes+1)})
	wantArgError(t, err, "content", "1048577 bytes", "1048576")
	ws, _ := r.Workspace(testTask)
	if _, err := os.Stat(filepath.Join(ws, "past")); !os.IsNotExist(err) {
		t.Fatalf("the refused write created its file: %v", err)
	}
}

// TestWorkspaceTotalLimit fills the workspace with a sparse file (its
// apparent size counts) and writes up to the limit and past it.
func TestWorkspaceTotalLimit(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	f, err := os.Create(filepath.Join(ws, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxWorkspaceBytes - MaxWriteBytes); err != nil {
		t.Fatal(err)
	}
	f.Close()

	full := strings.Repeat("x", MaxWriteBytes)
	mustCall(t, r, ToolWorkspaceWrite, map[string]any{"path": "a", "content": full}, nil) // exactly at the limit
	tests := []struct {
		name string
		args map[string]any
		ok   bool
	}{
		{"one byte more", map[string]any{"path": "b", "content": "x"}, false},
		{"append one byte", map[string]any{"path": "a", "content": "x", "append": true}, false},
		{"replace with the same size", map[string]any{"path": "a", "content": full}, true},
		{"replace with nothing", map[string]any{"path": "a", "content": ""}, true},
		{"the freed space again", map[string]any{"path": "b", "content": full}, true},
		{"and one byte more", map[string]any{"path": "c", "content": "x"}, false},
	}
	for _, tt := range tests {
		_, err := callTool(t, t.Context(), r, ToolWorkspaceWrite, tt.args)
		if tt.ok && err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if !tt.ok {
			wantArgError(t, err, "content", strconv.Itoa(MaxWorkspaceBytes+1)+" bytes", strconv.Itoa(MaxWorkspaceBytes))
		}
	}
}

func TestWorkspaceReadLimit(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	writeFile(t, filepath.Join(ws, "at"), bytes.Repeat([]byte("a"), MaxReadBytes))
	writeFile(t, filepath.Join(ws, "past"), bytes.Repeat([]byte("p"), MaxReadBytes+1))

	var rd readOut
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": "at"}, &rd)
	if len(rd.Content) != MaxReadBytes {
		t.Fatalf("read at the limit returned %d bytes", len(rd.Content))
	}
	_, err := callTool(t, t.Context(), r, ToolWorkspaceRead, map[string]any{"path": "past"})
	wantArgError(t, err, "limit", "offset and limit", strconv.Itoa(MaxReadBytes))

	// The same file in pieces.
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": "past", "limit": MaxReadBytes}, &rd)
	if len(rd.Content) != MaxReadBytes || rd.Size != MaxReadBytes+1 {
		t.Fatalf("read with limit: %d bytes, size %d", len(rd.Content), rd.Size)
	}
	mustCall(t, r, ToolWorkspaceRead, map[string]any{"path": "past", "offset": 1}, &rd)
	if len(rd.Content) != MaxReadBytes {
		t.Fatalf("read from offset 1: %d bytes", len(rd.Content))
	}
	_, err = callTool(t, t.Context(), r, ToolWorkspaceRead, map[string]any{"path": "past", "limit": MaxReadBytes + 1})
	wantArgError(t, err, "limit", strconv.Itoa(MaxReadBytes))
}

func TestWorkspaceListLimit(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, nil)
	ws := workspace(t, r)
	for _, tt := range []struct {
		dir       string
		n         int
		truncated bool
	}{
		{"at", MaxListEntries, false},
		{"past", MaxListEntries + 1, true},
	} {
		for i := range tt.n {
			writeFile(t, filepath.Join(ws, tt.dir, strconv.Itoa(i)), nil)
		}
		var ls listOut
		mustCall(t, r, ToolWorkspaceList, map[string]any{"path": tt.dir}, &ls)
		if len(ls.Entries) != MaxListEntries || ls.Truncated != tt.truncated {
			t.Errorf("%s: %d entries, truncated %v", tt.dir, len(ls.Entries), ls.Truncated)
		}
		if !slices.IsSortedFunc(ls.Entries, func(a, b listEntry) int { return strings.Compare(a.Name, b.Name) }) {
			t.Errorf("%s: entries are not sorted", tt.dir)
		}
	}
}

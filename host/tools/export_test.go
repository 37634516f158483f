package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// exportTree makes a workspace root with task t1's workspace holding a
// file, a subdirectory, symlinks in and out, and a FIFO; outside holds a
// secret the symlinks point at.
func exportTree(t *testing.T) (root string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "workspaces")
	ws := filepath.Join(root, "t1")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(ws, "sub"), outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(ws, "notes.md"):        "# notes\n",
		filepath.Join(ws, "sub", "a.txt"):    "a",
		filepath.Join(outside, "secret.txt"): "secret",
	}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(ws, "out"):      outside,
		filepath.Join(ws, "in"):       "notes.md",
		filepath.Join(ws, "subln"):    "sub",
		filepath.Join(root, "linked"): ws, // a workspace that is a symlink
	}
	for l, target := range links {
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestOpenExport(t *testing.T) {
	root := exportTree(t)
	for _, tc := range []struct {
		task, path string
		want       string // content, or "" when refused
		wantErr    error
		wantMsg    string
	}{
		{"t1", "notes.md", "# notes\n", nil, ""},
		{"t1", "sub/a.txt", "a", nil, ""},
		{"t1", "./sub//a.txt", "a", nil, ""},
		{"t1", "in", "", ErrExportPath, "is a symlink"},
		{"t1", "out/secret.txt", "", ErrExportPath, `through the symlink "out"`},
		{"t1", "subln/a.txt", "", ErrExportPath, `through the symlink "subln"`},
		{"t1", "../../outside/secret.txt", "", ErrExportPath, `".." segment`},
		{"t1", "/etc/passwd", "", ErrExportPath, "absolute"},
		{"t1", "sub", "", ErrExportPath, "is a directory"},
		{"t1", "fifo", "", ErrExportPath, "not a regular file"},
		{"t1", "", "", ErrExportPath, "workspace itself"},
		{"t1", strings.Repeat("a", MaxPathBytes+1), "", ErrExportPath, `"` + strings.Repeat("a", 100) + `..." is 513 bytes; the limit is 512`},
		{"t1", strings.Repeat("d/", MaxPathBytes/2-1) + "xy", "", fs.ErrNotExist, ""}, // at the limit: looked up
		{"t1", "missing.txt", "", fs.ErrNotExist, ""},
		{"t2", "notes.md", "", fs.ErrNotExist, ""},
		{"linked", "notes.md", "", nil, "not a directory"},
	} {
		t.Run(tc.task+"/"+tc.path, func(t *testing.T) {
			f, _, err := OpenExport(root, tc.task, tc.path)
			if tc.want != "" {
				if err != nil {
					t.Fatalf("OpenExport: %v", err)
				}
				defer f.Close()
				b, err := io.ReadAll(f)
				if err != nil || string(b) != tc.want {
					t.Fatalf("read %q, %v; want %q", b, err, tc.want)
				}
				return
			}
			if err == nil {
				f.Close()
				t.Fatal("OpenExport succeeded; want a refusal")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want errors.Is %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %q does not say %q", err, tc.wantMsg)
			}
		})
	}
}

func TestListExport(t *testing.T) {
	root := exportTree(t)
	got, truncated, err := ListExport(context.Background(), root, "t1", "")
	if err != nil || truncated {
		t.Fatalf("ListExport: %v, truncated %v", err, truncated)
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, fmt.Sprintf("%s %s %d", e.Path, e.Type, e.Size))
	}
	want := "fifo other 0|in symlink 0|notes.md file 8|out symlink 0|sub dir 0|sub/a.txt file 1|subln symlink 0"
	if g := strings.Join(lines, "|"); g != want {
		t.Fatalf("listing\n got %s\nwant %s", g, want)
	}
	if got, _, err := ListExport(context.Background(), root, "t1", "sub"); err != nil || len(got) != 1 || got[0].Path != "sub/a.txt" {
		t.Fatalf("ListExport(sub) = %v, %v", got, err)
	}
	if got, _, err := ListExport(context.Background(), root, "never-ran", ""); err != nil || len(got) != 0 {
		t.Fatalf("a missing workspace lists %v, %v; want empty", got, err)
	}
	for _, p := range []string{"out", "subln", "notes.md", "../t2"} {
		if _, _, err := ListExport(context.Background(), root, "t1", p); !errors.Is(err, ErrExportPath) {
			t.Errorf("ListExport(%q) error %v, want ErrExportPath", p, err)
		}
	}
}

// The listing bounds, entries and bytes, each at the limit and one past it,
// on disk and stored.
func TestListExportBound(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "t1")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Five entries of two bytes each: 10 bytes of paths.
	for _, tc := range []struct {
		maxEntries, maxBytes int
		want                 int
		wantTruncated        bool
	}{
		{5, 1 << 20, 5, false},
		{4, 1 << 20, 4, true},
		{100, 10, 5, false},
		{100, 9, 4, true},
	} {
		t.Run(fmt.Sprintf("entries%d_bytes%d", tc.maxEntries, tc.maxBytes), func(t *testing.T) {
			got, truncated, err := listExport(context.Background(), root, "t1", "", tc.maxEntries, tc.maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want || truncated != tc.wantTruncated {
				t.Fatalf("%d entries, truncated %v; want %d, %v", len(got), truncated, tc.want, tc.wantTruncated)
			}
			// The same tree as the store holds it is cut alike.
			got, truncated, err = listStored(context.Background(), storedOf(t, root), "", tc.maxEntries, tc.maxBytes)
			if err != nil || len(got) != tc.want || truncated != tc.wantTruncated {
				t.Fatalf("stored: %d entries, truncated %v, %v; want %d, %v", len(got), truncated, err, tc.want, tc.wantTruncated)
			}
		})
	}
}

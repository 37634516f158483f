package tools

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// storedOf is the workspace of task t1 under root as the store would hold
// it: its regular files and symlinks (the store keeps nothing else).
func storedOf(t *testing.T, root string) []StoredFile {
	t.Helper()
	ws := filepath.Join(root, "t1")
	var out []StoredFile
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == ws {
			return err
		}
		rel, _ := filepath.Rel(ws, p)
		switch info, err := d.Info(); {
		case err != nil:
			return err
		case d.Type()&fs.ModeSymlink != 0:
			out = append(out, StoredFile{Path: filepath.ToSlash(rel), Symlink: true})
		case d.Type().IsRegular():
			out = append(out, StoredFile{Path: filepath.ToSlash(rel), Size: info.Size()})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kind is what a test compares of an export's answer: success, a path
// refusal with its message, or a missing file.
func kind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrExportPath):
		return "refused: " + err.Error()
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	}
	return "error: " + err.Error()
}

// A stored workspace lists and refuses exactly as the same tree on disk:
// the same entries in the same order (without modification times, which
// the store does not keep), the same refusals with the same messages.
func TestStoredExportMatchesDisk(t *testing.T) {
	t.Parallel()
	root := exportTree(t)
	if err := os.Remove(filepath.Join(root, "t1", "fifo")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "t1", "sub", "deeper"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sub/deeper/z", "sub.txt", "a-b"} {
		if err := os.WriteFile(filepath.Join(root, "t1", name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := storedOf(t, root)
	ctx := context.Background()
	for _, p := range []string{"", ".", "sub", "sub/deeper", "./sub/", "out", "subln", "notes.md", "missing", "../t2", "/etc", "subln/x"} {
		t.Run("list "+p, func(t *testing.T) {
			disk, dtrunc, derr := ListExport(ctx, root, "t1", p)
			got, gtrunc, gerr := ListStored(ctx, files, p)
			if kind(gerr) != kind(derr) || gtrunc != dtrunc {
				t.Fatalf("stored: %s (truncated %v); on disk: %s (truncated %v)", kind(gerr), gtrunc, kind(derr), dtrunc)
			}
			for i := range disk {
				disk[i].Modified = got[i].Modified
			}
			if !reflect.DeepEqual(got, disk) {
				t.Fatalf("stored lists\n%v\non disk\n%v", got, disk)
			}
		})
	}
	for _, p := range []string{"notes.md", "sub/a.txt", "./sub//a.txt", "in", "out/secret.txt", "subln/a.txt", "../../outside/secret.txt",
		"/etc/passwd", "sub", "", strings.Repeat("a", MaxPathBytes+1), "missing.txt"} {
		t.Run("find "+p, func(t *testing.T) {
			f, fi, derr := OpenExport(root, "t1", p)
			if derr == nil {
				defer f.Close()
			}
			got, gerr := FindStored(files, p)
			if kind(gerr) != kind(derr) {
				t.Fatalf("stored: %s; on disk: %s", kind(gerr), kind(derr))
			}
			if derr == nil && got.Size != fi.Size() {
				t.Fatalf("stored size %d, on disk %d", got.Size, fi.Size())
			}
		})
	}
}

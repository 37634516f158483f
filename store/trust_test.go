package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// otherUID owns the files a second local user would plant.
const otherUID = 12345

// treeState records every path under root without following links: mode,
// owner, size, times (ctime catches a chmod or chown) and content.
func treeState(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		s := fmt.Sprintf("%v uid=%d gid=%d size=%d mtime=%v ctime=%v", fi.Mode(), st.Uid, st.Gid, fi.Size(), st.Mtim, st.Ctim)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			s += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			s += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
		}
		out[path] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A writable store refuses a symlinked or foreign store file, companion
// file or directory before SQLite sees any of them, and leaves the tree as
// it was; a read-only open refuses a symlinked store file but reads another
// uid's store (taskhost inspect run by an operator).
func TestOpenRefusesUntrustedFiles(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: files of another uid are made with chown")
	}
	cases := []struct {
		name     string
		readOnly bool
		// setup gets a dir with a closed store "data/taskhost.db" and an
		// empty "outside" beside it; it returns the path to open.
		setup func(t *testing.T, db, outside string) string
		want  string // "" = opens
	}{
		{"store file is a symlink", false, func(t *testing.T, db, outside string) string {
			mustRename(t, db, filepath.Join(outside, "real.db"))
			mustSymlink(t, filepath.Join(outside, "real.db"), db)
			return db
		}, "store file DB is a symlink to OUTSIDE/real.db: refusing"},
		{"store file is a symlink, read-only", true, func(t *testing.T, db, outside string) string {
			mustRename(t, db, filepath.Join(outside, "real.db"))
			mustSymlink(t, filepath.Join(outside, "real.db"), db)
			return db
		}, "store file DB is a symlink to OUTSIDE/real.db: refusing"},
		{"store file owned by another uid", false, func(t *testing.T, db, _ string) string {
			mustChown(t, db)
			return db
		}, "store file DB is owned by uid 12345, not by this process's uid 0"},
		{"WAL is a symlink", false, func(t *testing.T, db, outside string) string {
			mustWrite(t, filepath.Join(outside, "wal"))
			mustSymlink(t, filepath.Join(outside, "wal"), db+"-wal")
			return db
		}, "store file DB-wal is a symlink to OUTSIDE/wal"},
		{"dangling WAL symlink", false, func(t *testing.T, db, outside string) string {
			mustSymlink(t, filepath.Join(outside, "new-wal"), db+"-wal")
			return db
		}, "store file DB-wal is a symlink to OUTSIDE/new-wal"},
		{"WAL owned by another uid", false, func(t *testing.T, db, _ string) string {
			mustWrite(t, db+"-wal")
			mustChown(t, db+"-wal")
			return db
		}, "store file DB-wal is owned by uid 12345"},
		{"SHM is a symlink", false, func(t *testing.T, db, outside string) string {
			mustWrite(t, filepath.Join(outside, "shm"))
			mustSymlink(t, filepath.Join(outside, "shm"), db+"-shm")
			return db
		}, "store file DB-shm is a symlink"},
		{"rollback journal is a directory", false, func(t *testing.T, db, _ string) string {
			if err := os.Mkdir(db+"-journal", 0o700); err != nil {
				t.Fatal(err)
			}
			return db
		}, "DB-journal is not a regular file"},
		{"data directory is a symlink", false, func(t *testing.T, db, outside string) string {
			link := filepath.Join(outside, "link")
			mustSymlink(t, filepath.Dir(db), link)
			return filepath.Join(link, "taskhost.db")
		}, "data directory OUTSIDE/link is a symlink to"},
		{"data directory owned by another uid", false, func(t *testing.T, db, _ string) string {
			mustChown(t, filepath.Dir(db))
			return db
		}, "is owned by uid 12345"},
		{"another uid's store, read-only", true, func(t *testing.T, db, _ string) string {
			mustChown(t, db)
			mustChown(t, filepath.Dir(db))
			return db
		}, ""},
		{"own store, writable", false, func(t *testing.T, db, _ string) string { return db }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir, outside := filepath.Join(root, "data"), filepath.Join(root, "outside")
			for _, d := range []string{dir, outside} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			db := makeStore(t, dir)
			path := tc.setup(t, db, outside)
			want := strings.NewReplacer("OUTSIDE", outside, "DB", db).Replace(tc.want)

			before := treeState(t, root)
			s, err := Open(context.Background(), path, Options{ReadOnly: tc.readOnly})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if got := getTask(t, s, "p", "task-07"); got.ID != "task-07" {
					t.Fatalf("read %+v", got)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded, want a refusal")
			}
			var oe *OpenError
			if !errors.As(err, &oe) || !strings.Contains(err.Error(), want) || oe.Hint == "" {
				t.Fatalf("error %v\nwant an *OpenError with a hint saying %q", err, want)
			}
			after := treeState(t, root)
			for p, b := range before {
				if after[p] != b {
					t.Errorf("%s changed:\n %s\n %s", p, b, after[p])
				}
			}
			for p := range after {
				if _, ok := before[p]; !ok {
					t.Errorf("%s was created", p)
				}
			}
		})
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustChown(t *testing.T, path string) {
	t.Helper()
	if err := os.Lchown(path, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

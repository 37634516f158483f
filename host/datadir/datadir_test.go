package datadir

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/taskhost/taskhost/internal/testwait"
)

// otherUID owns the files a second local user would plant.
const otherUID = 12345

// treeEntry is everything observable about one path of a tree: a refused
// open must leave all of it as it was. ctime catches a chmod or chown even
// to the same mode or owner.
type treeEntry struct {
	Mode         fs.FileMode
	UID, GID     uint32
	Size         int64
	Mtime, Ctime syscall.Timespec
	Link         string
	SHA256       string
}

// snapshotTree records every path under roots, without following links.
func snapshotTree(t *testing.T, roots ...string) map[string]treeEntry {
	t.Helper()
	out := map[string]treeEntry{}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(path)
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			e := treeEntry{Mode: fi.Mode(), UID: st.Uid, GID: st.Gid, Size: fi.Size(), Mtime: st.Mtim, Ctime: st.Ctim}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				if e.Link, err = os.Readlink(path); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				e.SHA256 = fmt.Sprintf("%x", sha256.Sum256(data))
			}
			out[path] = e
			return nil
		})
		if err != nil {
			t.Fatalf("snapshot %s: %v", root, err)
		}
	}
	return out
}

func diffTrees(before, after map[string]treeEntry) []string {
	var diffs []string
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			diffs = append(diffs, "removed "+p)
		case a != b:
			diffs = append(diffs, fmt.Sprintf("changed %s: %+v -> %+v", p, b, a))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			diffs = append(diffs, "created "+p)
		}
	}
	return diffs
}

// populatedDataDir is a data dir as a host leaves it after a clean stop:
// store, key, lock, socket dir, and a workspace.
func populatedDataDir(t *testing.T, dir string) {
	t.Helper()
	if err := openBareDir(t, dir).Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, WorkspaceDirName, "t_existing"), 0o700); err != nil {
		t.Fatal(err)
	}
}

func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// A data dir, or any entry of it the host uses, that is a symlink, another
// user's, or open to others is refused before anything is written: the
// whole tree (and whatever a link points to) is byte for byte, mode for
// mode, ctime for ctime as it was.
func TestOpenRefusesUntrustedDataDir(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: files of another uid are made with chown")
	}
	cases := []struct {
		name string
		// setup prepares base (a populated data dir) and outside (a scratch
		// dir beside it) and returns the --data-dir to open.
		setup func(t *testing.T, base, outside string) string
		want  string
	}{
		{"data dir owned by another uid", func(t *testing.T, base, _ string) string {
			mustDo(t, os.Chown(base, otherUID, otherUID))
			return base
		}, "is owned by uid 12345, not by this daemon's uid 0"},
		{"fresh data dir pre-created by another uid", func(t *testing.T, _, outside string) string {
			d := filepath.Join(outside, "planted")
			mustDo(t, os.Mkdir(d, 0o700), os.WriteFile(filepath.Join(d, KeyFile), make([]byte, 32), 0o600),
				os.Symlink("/etc", filepath.Join(d, WorkspaceDirName)),
				os.Lchown(filepath.Join(d, KeyFile), otherUID, otherUID), os.Chown(d, otherUID, otherUID))
			return d
		}, "planted is owned by uid 12345"},
		{"data dir is a symlink", func(t *testing.T, base, outside string) string {
			link := filepath.Join(outside, "link")
			mustDo(t, os.Symlink(base, link))
			return link
		}, "link is a symlink to " + "BASE"},
		{"data dir writable by others", func(t *testing.T, base, _ string) string {
			mustDo(t, os.Chmod(base, 0o777))
			return base
		}, "has mode 0777: it is writable by group or others: refusing; run: chmod go-w"},
		{"workspaces dir is a symlink", func(t *testing.T, base, outside string) string {
			ws := filepath.Join(base, WorkspaceDirName)
			mustDo(t, os.Rename(ws, filepath.Join(outside, "ws")), os.Symlink(filepath.Join(outside, "ws"), ws))
			return base
		}, WorkspaceDirName + " is a symlink to OUTSIDE/ws: refusing; remove the link"},
		{"workspaces dir owned by another uid", func(t *testing.T, base, _ string) string {
			mustDo(t, os.Chown(filepath.Join(base, WorkspaceDirName), otherUID, otherUID))
			return base
		}, WorkspaceDirName + " is owned by uid 12345"},
		{"socket dir is a symlink", func(t *testing.T, base, outside string) string {
			p := filepath.Join(base, SocketDirName)
			mustDo(t, os.Remove(p), os.Symlink(outside, p))
			return base
		}, SocketDirName + " is a symlink to OUTSIDE"},
		{"key owned by another uid", func(t *testing.T, base, _ string) string {
			mustDo(t, os.Lchown(filepath.Join(base, KeyFile), otherUID, otherUID))
			return base
		}, KeyFile + " is owned by uid 12345"},
		{"key is a symlink", func(t *testing.T, base, outside string) string {
			k := filepath.Join(base, KeyFile)
			mustDo(t, os.Rename(k, filepath.Join(outside, "key")), os.Symlink(filepath.Join(outside, "key"), k))
			return base
		}, KeyFile + " is a symlink to OUTSIDE/key"},
		{"key has mode 0644", func(t *testing.T, base, _ string) string {
			mustDo(t, os.Chmod(filepath.Join(base, KeyFile), 0o644))
			return base
		}, KeyFile + " has mode 0644: it must be 0600"},
		{"key is a directory", func(t *testing.T, base, _ string) string {
			k := filepath.Join(base, KeyFile)
			mustDo(t, os.Remove(k), os.Mkdir(k, 0o700))
			return base
		}, KeyFile + " is a directory, not a regular file"},
		{"store file is a symlink", func(t *testing.T, base, outside string) string {
			db := filepath.Join(base, StoreFile)
			mustDo(t, os.Rename(db, filepath.Join(outside, "real.db")), os.Symlink(filepath.Join(outside, "real.db"), db))
			return base
		}, StoreFile + " is a symlink to OUTSIDE/real.db"},
		{"store file owned by another uid", func(t *testing.T, base, _ string) string {
			mustDo(t, os.Chown(filepath.Join(base, StoreFile), otherUID, otherUID))
			return base
		}, StoreFile + " is owned by uid 12345"},
		{"WAL is a symlink", func(t *testing.T, base, outside string) string {
			mustDo(t, os.WriteFile(filepath.Join(outside, "wal"), nil, 0o600),
				os.Symlink(filepath.Join(outside, "wal"), filepath.Join(base, StoreFile+"-wal")))
			return base
		}, StoreFile + "-wal is a symlink to OUTSIDE/wal"},
		{"shared memory file owned by another uid", func(t *testing.T, base, _ string) string {
			shm := filepath.Join(base, StoreFile+"-shm")
			mustDo(t, os.WriteFile(shm, nil, 0o600), os.Chown(shm, otherUID, otherUID))
			return base
		}, StoreFile + "-shm is owned by uid 12345"},
		{"lock file is a symlink", func(t *testing.T, base, outside string) string {
			l := filepath.Join(base, LockFile)
			mustDo(t, os.Remove(l), os.WriteFile(filepath.Join(outside, "victim"), []byte("keep me\n"), 0o600),
				os.Symlink(filepath.Join(outside, "victim"), l))
			return base
		}, LockFile + " is a symlink to OUTSIDE/victim"},
		{"API socket path is a regular file of another uid", func(t *testing.T, base, _ string) string {
			p := filepath.Join(base, apiSocketFile)
			mustDo(t, os.WriteFile(p, nil, 0o600), os.Chown(p, otherUID, otherUID))
			return base
		}, apiSocketFile + " is owned by uid 12345"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := testwait.ShortTempDir(t)
			base, outside := filepath.Join(root, "data"), filepath.Join(root, "outside")
			mustDo(t, os.Mkdir(outside, 0o700))
			populatedDataDir(t, base)
			dataDir := tc.setup(t, base, outside)
			want := strings.NewReplacer("BASE", base, "OUTSIDE", outside).Replace(tc.want)

			before := snapshotTree(t, root)
			_, err := tryOpen(t, dataDir)
			if err == nil {
				t.Fatal("Open succeeded, want a refusal")
			}
			var ue *UntrustedPathError
			if !errors.Is(err, ErrUntrustedDataDir) || !errors.As(err, &ue) {
				t.Fatalf("error %v (%T), want an *UntrustedPathError", err, err)
			}
			if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "refusing; ") {
				t.Fatalf("error %q\ndoes not say %q and what to do", msg, want)
			}
			if diffs := diffTrees(before, snapshotTree(t, root)); len(diffs) > 0 {
				t.Fatalf("the refused open changed the tree:\n%s", strings.Join(diffs, "\n"))
			}
		})
	}
}

// The good cases still open: a fresh data dir (created 0700), one a host
// left behind, one that serve opened to a group (0710), and a key of mode
// 0400.
func TestOpenAcceptsOwnDataDir(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"fresh", func(*testing.T, string) {}},
		{"left by a previous host", func(t *testing.T, dir string) { populatedDataDir(t, dir) }},
		{"opened to a group by serve", func(t *testing.T, dir string) {
			populatedDataDir(t, dir)
			mustDo(t, os.Chmod(dir, 0o710))
		}},
		{"key of mode 0400", func(t *testing.T, dir string) {
			populatedDataDir(t, dir)
			mustDo(t, os.Chmod(filepath.Join(dir, KeyFile), 0o400))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(testwait.ShortTempDir(t), "data")
			tc.setup(t, dir)
			d := openBareDir(t, dir)
			fi, err := os.Lstat(dir)
			if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077&^0o010 != 0 {
				t.Fatalf("data dir after open: %v, %v", fi.Mode(), err)
			}
			if _, err := d.Store.GetTask(context.Background(), alice, "t_none"); err == nil {
				t.Fatal("store answers for a task that does not exist")
			}
		})
	}
}

// The key is checked on the descriptor it is read from: a key swapped for
// a symlink or another user's file after checkDataDir ran is still refused
// by loadOrCreateKey, and a key of the wrong length is named as damaged.
func TestLoadKeyRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(t *testing.T, key, outside string)
		want  string
	}{
		{"symlink", func(t *testing.T, key, outside string) {
			mustDo(t, os.WriteFile(filepath.Join(outside, "k"), make([]byte, 32), 0o600), os.Symlink(filepath.Join(outside, "k"), key))
		}, "is a symlink to"},
		{"dangling symlink", func(t *testing.T, key, outside string) {
			mustDo(t, os.Symlink(filepath.Join(outside, "nothing"), key))
		}, "is a symlink to"},
		{"another uid", func(t *testing.T, key, _ string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root for chown")
			}
			mustDo(t, os.WriteFile(key, make([]byte, 32), 0o600), os.Chown(key, otherUID, otherUID))
		}, "is owned by uid 12345"},
		{"mode 0640", func(t *testing.T, key, _ string) {
			mustDo(t, os.WriteFile(key, make([]byte, 32), 0o600), os.Chmod(key, 0o640))
		}, "has mode 0640"},
		{"named pipe", func(t *testing.T, key, _ string) {
			mustDo(t, syscall.Mkfifo(key, 0o600))
		}, "is a named pipe, not a regular file"},
		{"31 bytes", func(t *testing.T, key, _ string) {
			mustDo(t, os.WriteFile(key, make([]byte, 31), 0o600))
		}, "is 31 bytes, want 32"},
		{"33 bytes", func(t *testing.T, key, _ string) {
			mustDo(t, os.WriteFile(key, make([]byte, 33), 0o600))
		}, "is 33 bytes, want 32"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			outside := filepath.Join(root, "outside")
			mustDo(t, os.Mkdir(outside, 0o700))
			key := filepath.Join(root, KeyFile)
			tc.setup(t, key, outside)
			before := snapshotTree(t, root)
			if _, err := loadOrCreateKey(key); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("loadOrCreateKey = %v, want an error saying %q", err, tc.want)
			}
			if diffs := diffTrees(before, snapshotTree(t, root)); len(diffs) > 0 {
				t.Fatalf("the refusal changed the tree:\n%s", strings.Join(diffs, "\n"))
			}
		})
	}
	t.Run("32 bytes, 0600", func(t *testing.T) {
		key := filepath.Join(t.TempDir(), KeyFile)
		want := []byte("0123456789abcdef0123456789abcdef")
		mustDo(t, os.WriteFile(key, want, 0o600))
		got, err := loadOrCreateKey(key)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("loadOrCreateKey = %q, %v", got, err)
		}
	})
}

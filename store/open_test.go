package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// makeStore creates a closed store with a few tasks at dir/taskhost.db.
func makeStore(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "taskhost.db")
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		createTask(t, s, "p", fmt.Sprintf("task-%02d", i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// rawExec runs statements on a store file without the store's checks.
func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func rootPage(t *testing.T, path, name string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var page int64
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE name = $1`, name).Scan(&page); err != nil {
		t.Fatal(err)
	}
	return page
}

// crashImage copies a store file and its WAL while a connection that has
// just run stmts is still open — the files a host leaves when it is killed —
// and returns the copy's path.
func crashImage(t *testing.T, dir string, stmts ...string) string {
	t.Helper()
	live := makeStore(t, t.TempDir())
	db, err := sql.Open("sqlite", "file:"+live+"?_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "taskhost.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(live + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if suffix == "-wal" && len(b) == 0 {
			t.Fatal("crash image has an empty WAL")
		}
		if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestOpenFaults opens broken stores and broken data dirs: each is refused
// with an *OpenError that names the file or directory and says what to do,
// and the file's bytes are left exactly as they were.
func TestOpenFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup returns the path to open.
		setup    func(t *testing.T, dir string) string
		opts     Options
		op       string
		contains []string // besides the path, which every message names
	}{
		{"garbage file", func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "taskhost.db")
			junk := make([]byte, 8192)
			for i := range junk {
				junk[i] = byte(i*31 + 7)
			}
			if err := os.WriteFile(path, junk, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, Options{}, "format", []string{"is not a valid taskhost store", "move it aside"}},
		{"overwritten header", func(t *testing.T, dir string) string {
			path := makeStore(t, dir)
			overwrite(t, path, 0, bytes.Repeat([]byte("x"), 100))
			return path
		}, Options{}, "format", []string{"is not a valid taskhost store"}},
		{"truncated header", func(t *testing.T, dir string) string {
			path := makeStore(t, dir)
			if err := os.Truncate(path, 50); err != nil {
				t.Fatal(err)
			}
			return path
		}, Options{}, "format", []string{"is not a valid taskhost store"}},
		{"corrupt page", func(t *testing.T, dir string) string {
			path := makeStore(t, dir)
			page := rootPage(t, path, "tasks_principal_seq")
			overwrite(t, path, (page-1)*4096, bytes.Repeat([]byte{0xA5}, 4096))
			return path
		}, Options{}, "integrity", []string{"failed its integrity check", "restore it from a backup"}},
		{"another application's database", func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "taskhost.db")
			rawExec(t, path, `CREATE TABLE notes (body TEXT)`)
			return path
		}, Options{}, "format", []string{"another application"}},
		{"newer schema", func(t *testing.T, dir string) string {
			path := makeStore(t, dir)
			rawExec(t, path, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion()+1))
			return path
		}, Options{}, "schema", []string{fmt.Sprintf(
			"store schema version %d is newer than this binary supports (%d); upgrade taskhost",
			schemaVersion()+1, schemaVersion())}},
		{"newer schema, read-only", func(t *testing.T, dir string) string {
			path := makeStore(t, dir)
			rawExec(t, path, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion()+1))
			return path
		}, Options{ReadOnly: true}, "schema", []string{"upgrade taskhost"}},
		{"older schema, read-only", func(t *testing.T, dir string) string {
			path := makeStore(t, dir)
			rawExec(t, path, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion()-1))
			return path
		}, Options{ReadOnly: true}, "schema", []string{"is older than this binary", "migrate"}},
		{"newer schema in a crashed host's WAL", func(t *testing.T, dir string) string {
			return crashImage(t, dir, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion()+1))
		}, Options{}, "schema", []string{"upgrade taskhost"}},
		{"read-only file", func(t *testing.T, dir string) string {
			path := makeStore(t, dir)
			if err := os.Chmod(path, 0o444); err != nil {
				t.Fatal(err)
			}
			return path
		}, Options{}, "read-only", []string{"is read-only (mode 0444)", "chmod u+w", "taskhost inspect"}},
		{"missing file, read-only", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "taskhost.db")
		}, Options{ReadOnly: true}, "file", []string{"does not exist"}},
		{"store path is a directory", func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "taskhost.db")
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			return path
		}, Options{}, "file", []string{"is a directory"}},
		{"data dir missing", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "nope", "taskhost.db")
		}, Options{}, "data dir", []string{"does not exist", "mkdir -p"}},
		{"data dir is a file", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, "file")
			if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(f, "taskhost.db")
		}, Options{}, "data dir", []string{"is not a directory"}},
		{"data dir mode 0555", func(t *testing.T, dir string) string {
			path := makeStore(t, dir)
			if err := os.Chmod(dir, 0o555); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(dir, 0o700) }) // so t.TempDir can clean up
			return path
		}, Options{}, "data dir", []string{"is not writable (mode 0555)", "chmod u+w"}},
		{"bad synchronous option", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "taskhost.db")
		}, Options{Synchronous: "OFF"}, "options", []string{"FULL or NORMAL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tt.setup(t, dir)
			before, readErr := os.ReadFile(path)

			s, err := Open(context.Background(), path, tt.opts)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			var oe *OpenError
			if !errors.As(err, &oe) {
				t.Fatalf("error %T %v, want *OpenError", err, err)
			}
			if tt.op == "read-only" && !errors.Is(err, ErrReadOnly) {
				t.Fatalf("read-only refusal does not match ErrReadOnly: %v", err)
			}
			if oe.Op != tt.op || oe.Path != path {
				t.Fatalf("OpenError{Op: %q, Path: %q}, want Op %q: %v", oe.Op, oe.Path, tt.op, err)
			}
			msg := err.Error()
			for _, want := range append([]string{path}, tt.contains...) {
				if !strings.Contains(msg, want) {
					t.Fatalf("error %q does not say %q", msg, want)
				}
			}
			t.Logf("%s", msg)
			after, afterErr := os.ReadFile(path)
			if (readErr == nil) != (afterErr == nil) || !bytes.Equal(before, after) {
				t.Fatal("a refused open changed the file")
			}
		})
	}
}

func TestOpenReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := makeStore(t, dir)
	// A read-only file is fine for a read-only open.
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	task, err := s.GetTask(ctx, "p", "task-07")
	if err != nil || task.ID != "task-07" {
		t.Fatalf("read in read-only mode: %+v %v", task, err)
	}
	if list, err := s.ListTasks(ctx, "p", ListQuery{}); err != nil || len(list) != 50 {
		t.Fatalf("list in read-only mode: %d %v", len(list), err)
	}
	writes := []func() error{
		func() error {
			_, err := s.CreateTask(ctx, NewTask{ID: "x", PrincipalID: "p", Executor: "e", Spec: []byte(`{}`)})
			return err
		},
		func() error { _, err := s.Cancel(ctx, "p", "task-07"); return err },
		func() error { _, err := s.Recover(ctx, 0, nil); return err },
		func() error { return s.Heartbeat(ctx, "p", "task-07", 1, 5) },
	}
	for i, w := range writes {
		if err := w(); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("write %d in read-only mode: %v, want ErrReadOnly", i, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("read-only open changed the file")
	}
}

// TestOpenExisting reopens a store: data survives, and a store file created
// by Open is private to its owner.
func TestOpenExisting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := makeStore(t, t.TempDir())
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("new store file mode %04o, want 0600", perm)
	}
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Path() != path {
		t.Fatalf("Path() = %q", s.Path())
	}
	if got, err := s.ListTasks(ctx, "p", ListQuery{}); err != nil || len(got) != 50 {
		t.Fatalf("reopened store lists %d tasks, %v", len(got), err)
	}
	var mode string
	if err := s.r.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q %v", mode, err)
	}
	// A path with URI-special characters is a plain path, not a URI.
	odd := filepath.Join(t.TempDir(), "a?b#c%d")
	if err := os.Mkdir(odd, 0o700); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, filepath.Join(odd, "taskhost.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	createTask(t, s2, "p", "x")
	s2.Close()
	if _, err := os.Stat(filepath.Join(odd, "taskhost.db")); err != nil {
		t.Fatalf("store not at the given path: %v", err)
	}
}

// TestSQLiteReadOnlyError maps SQLite's own read-only refusal (here: the
// file became read-only under an open store) to ErrReadOnly.
func TestSQLiteReadOnlyError(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	createTask(t, s, "p", "t")
	// query_only makes SQLite refuse writes with SQLITE_READONLY, as a file
	// the process cannot write would; root ignores mode bits, so this is
	// the portable way to provoke it.
	if _, err := s.w.Exec(`PRAGMA query_only = 1`); err != nil {
		t.Fatal(err)
	}
	_, err := s.Cancel(context.Background(), "p", "t")
	if !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("write refused by SQLite: %v, want ErrReadOnly naming the file", err)
	}
	if _, err := s.w.Exec(`PRAGMA query_only = 0`); err != nil {
		t.Fatal(err)
	}
}

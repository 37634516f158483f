package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// dsnEnv is the variable the postgres tests put their database's DSN in.
const dsnEnv = "TASKHOST_TEST_STORE_DSN"

// onPostgres points a config at the database in dsnEnv.
func onPostgres(c *config.Config) {
	c.Store.Driver, c.Store.DSNEnv = config.StorePostgres, dsnEnv
}

// TestPostgresStoreRunsAndRecovers runs real tasks end to end on a
// PostgreSQL store: one to completion; another stopped mid-step with its
// host, found interrupted by the next host on the same database, resumed
// there and completed with what was left of its budgets. The data dir
// keeps the lock and key but no store file, and says where the store is.
func TestPostgresStoreRunsAndRecovers(t *testing.T) {
	t.Setenv(dsnEnv, testpg.DSN(t))
	ctx := context.Background()
	dir := testwait.ShortTempDir(t)
	pidDir := testwait.PluginDir(t)
	h, err := Open(ctx, Options{DataDir: dir, Config: pgConfig(t), ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	done := create(t, h, alice, map[string]any{"steps": 3}, Limits{})
	got := waitEnd(t, h, alice, done.ID)
	wantStatus(t, got, store.StatusCompleted, store.ReasonNone)
	if got.Budgets.Steps.Used != 3 {
		t.Fatalf("completed task used %d steps, want 3", got.Budgets.Steps.Used)
	}
	if _, err := os.Lstat(filepath.Join(dir, datadir.StoreFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a postgres host left a store file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, datadir.PostgresMarker)); err != nil {
		t.Fatalf("marker: %v", err)
	}

	task := create(t, h, alice, map[string]any{"steps": 3, "sleep_at_attempt": 2, "long_sleep_ms": 60000,
		"pid_file": filepath.Join(pidDir, "pid")}, Limits{Steps: 10})
	testwait.Until(t, 15e9, "attempt 2 to start", func() bool {
		log, _ := os.ReadFile(filepath.Join(pidDir, "pid.log"))
		return strings.Contains(string(log), "attempt 2 started")
	})
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}

	h2, err := Open(ctx, Options{DataDir: dir, Config: pgConfig(t), ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { h2.Close(context.WithoutCancel(ctx)) })
	got, err = h2.Runner.Get(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, store.StatusInterrupted, store.ReasonHostShutdown)
	if got.Budgets.Steps.Used != 2 {
		t.Fatalf("interrupted task used %d steps, want 2 (one done, one interrupted)", got.Budgets.Steps.Used)
	}
	if _, err := h2.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	got = waitEnd(t, h2, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, store.ReasonNone)
	// Resumed with what was left: 2 used before, then the interrupted
	// step again and the last one.
	if got.RunID != 2 || got.Budgets.Steps.Used != 4 || got.Budgets.Steps.Limit != 10 {
		t.Fatalf("resumed task: run %d, steps %+v; want run 2, 4 of 10 used", got.RunID, got.Budgets.Steps)
	}
}

func pgConfig(tb testing.TB) config.Config {
	tb.Helper()
	c := testConfig(tb)
	onPostgres(&c)
	return c
}

// TestPostgresStoreRefusals checks the mistakes an operator can make with
// the store choice: an unset DSN variable, a server that is not there, a
// data dir that already holds a SQLite store, and the SQLite-only
// commands on a postgres data dir. Each is a clear error; nothing panics.
func TestPostgresStoreRefusals(t *testing.T) {
	ctx := context.Background()
	open := func(dir string, cfg config.Config) error {
		h, err := Open(ctx, Options{DataDir: dir, Config: cfg, ExecutorDir: executorDir(t)})
		if err == nil {
			h.Close(ctx)
		}
		return err
	}
	t.Run("dsn_env unset", func(t *testing.T) {
		t.Setenv(dsnEnv, "")
		err := open(testwait.ShortTempDir(t), pgConfig(t))
		if err == nil || !strings.Contains(err.Error(), dsnEnv) || !strings.Contains(err.Error(), "unset or empty") {
			t.Fatalf("err = %v, want one naming %s as unset", err, dsnEnv)
		}
	})
	t.Run("no server", func(t *testing.T) {
		t.Setenv(dsnEnv, "host="+testwait.ShortTempDir(t)+" user=nobody password=s3cret dbname=none connect_timeout=2")
		err := open(testwait.ShortTempDir(t), pgConfig(t))
		var oe *store.OpenError
		if !errors.As(err, &oe) || !strings.Contains(err.Error(), "cannot reach the PostgreSQL server") {
			t.Fatalf("err = %v, want an *OpenError saying the server cannot be reached", err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("the error repeats the DSN's password: %v", err)
		}
	})
	t.Run("sqlite data dir", func(t *testing.T) {
		dir := testwait.ShortTempDir(t)
		if err := open(dir, testConfig(t)); err != nil {
			t.Fatal(err)
		}
		t.Setenv(dsnEnv, testpg.DSN(t))
		if err := open(dir, pgConfig(t)); err == nil || !strings.Contains(err.Error(), "holds a SQLite store") {
			t.Fatalf("err = %v, want a refusal of the SQLite data dir", err)
		}
	})
	t.Run("postgres data dir", func(t *testing.T) {
		dir := testwait.ShortTempDir(t)
		t.Setenv(dsnEnv, testpg.DSN(t))
		if err := open(dir, pgConfig(t)); err != nil {
			t.Fatal(err)
		}
		if err := open(dir, testConfig(t)); !errors.Is(err, datadir.ErrPostgresStore) {
			t.Fatalf("a SQLite host on a postgres data dir: %v, want ErrPostgresStore", err)
		}
		_, err := datadir.Backup(ctx, dir, filepath.Join(testwait.ShortTempDir(t), "b"))
		if !errors.Is(err, datadir.ErrPostgresStore) || !strings.Contains(err.Error(), "pg_dump") {
			t.Fatalf("backup: %v, want ErrPostgresStore pointing at pg_dump", err)
		}
	})
}

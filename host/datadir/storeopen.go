package datadir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/store"
)

// PostgresMarker is the data dir file that says its store is in PostgreSQL:
// the commands that read the store file (backup, restore, inspect) refuse
// such a data dir with what to do instead, and a SQLite host refuses it
// rather than start an empty store beside the real one.
const PostgresMarker = "store.postgres"

// ErrPostgresStore: the data dir's store is in PostgreSQL, which the
// command asked for cannot read (it reads the SQLite file).
var ErrPostgresStore = errors.New("the store is in PostgreSQL")

// openStore opens the store cfg.Store names: the SQLite file in dir, or
// the PostgreSQL database whose DSN is in the environment variable
// cfg.Store.DSNEnv (read now; the DSN is in no file).
func openStore(ctx context.Context, dir string, cfg config.Config, opts store.Options) (*store.Store, error) {
	marker := filepath.Join(dir, PostgresMarker)
	switch cfg.Store.Driver {
	case config.StorePostgres:
		if _, err := os.Lstat(filepath.Join(dir, StoreFile)); err == nil {
			return nil, fmt.Errorf("data dir %s holds a SQLite store (%s), and [store] driver = \"postgres\": "+
				"its tasks would be left behind; use another data dir for the PostgreSQL store, or set driver = \"sqlite\"", dir, StoreFile)
		}
		dsn := os.Getenv(cfg.Store.DSNEnv)
		if dsn == "" {
			return nil, fmt.Errorf("store.dsn_env: the environment variable %s is unset or empty: set it to the PostgreSQL DSN (e.g. postgres://taskhost@db.example/taskhost)", cfg.Store.DSNEnv)
		}
		st, err := store.OpenPostgres(ctx, dsn, opts, store.PoolOptions{
			MaxOpenConns:    cfg.Store.MaxOpenConns,
			MaxIdleConns:    cfg.Store.MaxIdleConns,
			ConnMaxLifetime: time.Duration(cfg.Store.ConnMaxLifetimeSeconds) * time.Second,
			// A host paused inside a write transaction holds row locks that
			// the other hosts' sweeps need: the server ends its session
			// well within the lease.
			IdleInTxTimeout: min(store.DefaultIdleInTxTimeout, time.Duration(cfg.Fleet.LeaseSeconds)*time.Second/3),
		})
		if err != nil {
			return nil, err
		}
		note := fmt.Sprintf("This data dir's tasks are in PostgreSQL (store.dsn_env = %s, %s).\n"+
			"Back them up with pg_dump; keep %s, which seals every checkpoint, with the dump.\n", cfg.Store.DSNEnv, st.Path(), KeyFile)
		if err := os.WriteFile(marker, []byte(note), 0o600); err != nil {
			st.Close()
			return nil, fmt.Errorf("data dir %s: %w", dir, err)
		}
		return st, nil
	default:
		if err := RefusePostgres(dir, "start a SQLite store in it"); err != nil {
			return nil, err
		}
		return store.Open(ctx, filepath.Join(dir, StoreFile), opts)
	}
}

// RefusePostgres returns an ErrPostgresStore error when dir's store is in
// PostgreSQL, for the commands that read the store file; doing names what
// cannot be done with it.
func RefusePostgres(dir, doing string) error {
	_, err := os.Lstat(filepath.Join(dir, PostgresMarker))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("data dir %s: %w (see %s): cannot %s; use pg_dump and psql for the database, "+
		"and run the daemon with [store] driver = \"postgres\"", dir, ErrPostgresStore, PostgresMarker, doing)
}

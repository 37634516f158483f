package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Backup writes a consistent copy of the store to path with SQLite's VACUUM
// INTO: a single read transaction, so it is safe while a host writes to the
// store (WAL readers never block the writer). path must not exist; the copy
// is created with mode 0600, since it holds every principal's tasks.
func (s *Store) Backup(ctx context.Context, path string) error {
	if _, ok := s.d.(pgDialect); ok {
		return fmt.Errorf("backup: store %s is in PostgreSQL: back it up with pg_dump: %w", s.path, ErrInvalid)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("backup: %s already exists: choose a new file", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("backup: %w", err)
	}
	// VACUUM INTO writes the copy with the default mode: create it first,
	// empty and private; SQLite then fills the empty file.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f.Close()
	conn, err := s.r.Conn(ctx)
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("backup: %w", err)
	}
	defer conn.Close()
	// The reader connections are query_only; VACUUM INTO writes only the
	// new file, but SQLite still counts it as a write.
	if _, err := conn.ExecContext(ctx, `PRAGMA query_only = 0`); err != nil {
		os.Remove(path)
		return fmt.Errorf("backup: %w", err)
	}
	_, err = conn.ExecContext(ctx, `VACUUM INTO $1`, path)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA query_only = 1`); rerr != nil {
		// A reader that could write must not go back to the pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("backup %s: %w", path, err)
	}
	return nil
}

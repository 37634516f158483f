package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// serverSettings reads the server's version and the settings that decide
// what a commit costs, to print with the figures: a cluster with fsync
// off measures no durable step at all.
func serverSettings(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx) //nolint:errcheck // read-only
	var version, fsync, syncCommit string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')`).
		Scan(&version, &fsync, &syncCommit); err != nil {
		return "", fmt.Errorf("server settings: %w", err)
	}
	s := fmt.Sprintf("server %s, fsync=%s, synchronous_commit=%s", version, fsync, syncCommit)
	if fsync != "on" || syncCommit != "on" {
		s += " (NOT durable: the figures measure no fsync)"
	}
	return s, nil
}

// walMeter reads the server's WAL insert position, to tell how many bytes
// of WAL each row's steps write: with fsync on, what a commit waits for
// grows with them.
type walMeter struct{ conn *pgx.Conn }

func openWAL(ctx context.Context, dsn string) (*walMeter, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return &walMeter{conn: conn}, nil
}

// position is the WAL insert position in bytes. Whatever else writes WAL
// meanwhile (River's maintenance, autovacuum, other sessions) counts too.
func (w *walMeter) position(ctx context.Context) (int64, error) {
	var n int64
	if err := w.conn.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&n); err != nil {
		return 0, fmt.Errorf("WAL position: %w", err)
	}
	return n, nil
}

func (w *walMeter) close() { w.conn.Close(context.Background()) } //nolint:errcheck // read-only

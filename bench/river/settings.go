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

package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// On PostgreSQL a host need not wait for its next poll to learn that
// another host committed a change to one of its runs (a cancel, an
// approval): the committer notifies the owner on fleetChannel with the
// owner's host id, and the owner's Listen wakes its lease watch at once.
// Notifications are only a hint — a lost one (a dropped connection, a host
// restarting) costs one poll interval, never a decision, because the owner
// always reads the store itself. SQLite has no notifications: hosts poll.

// fleetChannel is the PostgreSQL notification channel of a fleet.
const fleetChannel = "taskhost_fleet"

// CanNotify reports whether the store delivers notifications (PostgreSQL).
func (s *Store) CanNotify() bool { return s.listenCfg != nil }

// NotifyHost wakes host's Listen. It does nothing on SQLite, for an empty
// host, or for this host itself.
func (s *Store) NotifyHost(ctx context.Context, host string) error {
	if s.listenCfg == nil || host == "" || host == s.host {
		return nil
	}
	if err := CheckHostID(host); err != nil {
		return err
	}
	if s.w == nil {
		return ErrReadOnly
	}
	// PostgreSQL's own text: this never goes through the dialect.
	_, err := s.w.ExecContext(ctx, `SELECT pg_notify($1, $2)`, fleetChannel, host)
	return err
}

// Listen calls wake each time another host notifies this one, and once
// each time its LISTEN takes effect (at start and after a reconnect), for
// the notifications sent while it was not listening; until ctx ends. It
// returns ctx's error then, or ErrNoNotify at once on SQLite. It
// holds one connection of its own outside the pool; when that breaks,
// onErr is told and Listen connects again after retry (the lease watch's
// polling covers the gap).
func (s *Store) Listen(ctx context.Context, retry time.Duration, wake func(), onErr func(error)) error {
	if s.listenCfg == nil {
		return ErrNoNotify
	}
	for {
		err := s.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if onErr != nil {
			onErr(err)
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Store) listenOnce(ctx context.Context, wake func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.listenCfg)
	if err != nil {
		return fmt.Errorf("listen: connect: %w", err)
	}
	defer conn.Close(context.Background()) //nolint:errcheck // the connection is dropped either way
	if _, err := conn.Exec(ctx, "LISTEN "+fleetChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// What was notified before LISTEN took effect (at start, or while
	// reconnecting) is lost: one wake now reads it from the store.
	wake()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		if n.Payload == s.host {
			wake()
		}
	}
}

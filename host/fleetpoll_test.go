package host

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver the lock is taken through

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// A cancel committed without a notification (a lost NOTIFY, or a store
// without one) reaches the owner at its next lease poll, even while the
// owner's host heartbeat is stuck: here A's heartbeat waits on a row lock of
// its hosts row that another session holds. A poll that shared the
// heartbeat's goroutine would wait with it, for as long as the lock is held.
func TestFleetLeasePollNotHeldByHeartbeat(t *testing.T) {
	t.Parallel()
	dir := newSharedStore(t, "postgres")
	// A lease a stuck heartbeat takes seconds to lose: the cancel must
	// reach A by its poll, not race A's fencing of itself (CI's loaded run
	// fenced A first at quick's 400 ms).
	a := newFleetHost(t, dir, "host-a", quickLongLease)
	started, causes := blockedStep(a.exe)
	task, err := a.r.Create(context.Background(), alice, CreateRequest{Spec: []byte(`{"goal":"poll"}`)})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, started, "A's step")

	db, err := sql.Open("pgx", dir.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	lock, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback() //nolint:errcheck // released at the end either way
	if _, err := lock.ExecContext(ctx, `SELECT 1 FROM hosts WHERE id = 'host-a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "A's heartbeat to wait on the lock", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE hosts%'`).Scan(&n)
		return err == nil && n > 0
	})

	// The cancel commits through a store handle of its own, which notifies
	// nobody: only A's poll can find it.
	other, err := dir.open("host-c")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	t0 := time.Now()
	if _, err := other.Cancel(ctx, alice, task.ID, store.NewEvent{Type: EventTaskCancelled, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	const held = 3 * time.Second
	select {
	case cause := <-causes:
		if !errors.Is(cause, errUserCancelled) {
			t.Fatalf("A's step ended with %v, want the user's cancel", cause)
		}
		t.Logf("the cancel reached A's step %s after it committed, its heartbeat stuck (poll %s)", time.Since(t0).Round(time.Millisecond), quickLongLease.Poll)
	case <-time.After(held):
		t.Fatalf("the cancel did not reach A's step in %s: its lease poll waits for its stuck heartbeat", held)
	}
}

package host

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

func TestEnvelopeRoundTripAndTamper(t *testing.T) {
	t.Parallel()
	s := sealer{key: bytes.Repeat([]byte{7}, 32)}
	o := owner{TaskID: "t_a", PrincipalID: alice, Executor: "testexec"}
	env := s.seal(o, 3, plugin.Checkpoint{Schema: "testexec/1", Payload: []byte(`{"done":2}`)})
	cp, att, err := s.open(o, env)
	if err != nil || att != 3 || cp.Schema != "testexec/1" || string(cp.Payload) != `{"done":2}` {
		t.Fatalf("open = %+v, %d, %v", cp, att, err)
	}
	cases := map[string]struct {
		o   owner
		env []byte
		key []byte
	}{
		"other task":      {owner{"t_b", alice, "testexec"}, env, s.key},
		"other principal": {owner{"t_a", bob, "testexec"}, env, s.key},
		"other executor":  {owner{"t_a", alice, "legacy"}, env, s.key},
		"other key":       {o, env, bytes.Repeat([]byte{8}, 32)},
		"payload flipped": {o, append(bytes.Clone(env[:len(env)-1]), env[len(env)-1]^1), s.key},
		"truncated":       {o, env[:len(envelopeMagic)+2], s.key},
		"not an envelope": {o, []byte(`{"done":2}`), s.key},
		"empty":           {o, nil, s.key},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, _, err := (sealer{key: tc.key}).open(tc.o, tc.env); !errors.Is(err, ErrCheckpointIncompatible) {
				t.Fatalf("err = %v, want ErrCheckpointIncompatible", err)
			}
		})
	}
}

func FuzzOpenEnvelope(f *testing.F) {
	s := sealer{key: bytes.Repeat([]byte{7}, 32)}
	o := owner{TaskID: "t_a", PrincipalID: alice, Executor: "testexec"}
	f.Add(s.seal(o, 1, plugin.Checkpoint{Schema: "testexec/1", Payload: []byte("x")}))
	f.Add([]byte(envelopeMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, env []byte) {
		cp, _, err := s.open(o, env)
		if err == nil && !bytes.HasSuffix(env, cp.Payload) {
			t.Fatalf("opened an envelope whose payload is not its tail")
		}
	})
}

// A checkpoint envelope copied from task A into task B's row is refused.
func TestCopiedEnvelopeRefused(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	h := openHost(t, dir, nil)
	a := create(t, h, alice, map[string]any{"steps": 1}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, a.ID), store.StatusCompleted, "")
	b := create(t, h, alice, map[string]any{"steps": 3, "exit_at_attempt": 2}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, b.ID), store.StatusInterrupted, store.ReasonExecutorCrashed)

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, datadir.StoreFile)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE tasks SET checkpoint = (SELECT checkpoint FROM tasks WHERE id = ?) WHERE id = ?`, a.ID, b.ID)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("copy envelope: %v (%d rows)", err, n)
	}
	if _, err := h.Runner.Resume(context.Background(), alice, b.ID); err != nil {
		t.Fatal(err)
	}
	final := waitEnd(t, h, alice, b.ID)
	wantStatus(t, final, store.StatusFailed, store.ReasonCheckpointIncompatible)
	if final.Budgets.Steps.Used != 2 {
		t.Errorf("steps used = %d, want 2: no step may run on a foreign checkpoint", final.Budgets.Steps.Used)
	}
}

func TestOversizedCheckpointAndResult(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	limit := h.Runner.set.CheckpointMaxBytes
	cases := []struct {
		name   string
		te     map[string]any
		status store.Status
		reason store.Reason
	}{
		{"checkpoint at limit", map[string]any{"steps": 2, "checkpoint_bytes": limit}, store.StatusCompleted, ""},
		{"checkpoint past limit", map[string]any{"steps": 3, "misbehave_at_step": 2, "checkpoint_bytes": limit + 1}, store.StatusFailed, store.ReasonCheckpointTooLarge},
		{"result at limit", map[string]any{"result_bytes": 64 << 10}, store.StatusCompleted, ""},
		{"result past limit", map[string]any{"steps": 2, "result_bytes": 64<<10 + 1}, store.StatusFailed, store.ReasonResultTooLarge},
		{"unknown schema", map[string]any{"steps": 3, "misbehave_at_step": 2, "bad_schema": true}, store.StatusFailed, store.ReasonCheckpointIncompatible},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := create(t, h, alice, tc.te, Limits{})
			before := checkpointAfterFirstStep(t, h, task.ID)
			final := waitEnd(t, h, alice, task.ID)
			wantStatus(t, final, tc.status, tc.reason)
			if tc.status == store.StatusFailed && before != nil && !bytes.Equal(final.Checkpoint, before) {
				t.Errorf("the previous checkpoint was not kept")
			}
		})
	}
}

// checkpointAfterFirstStep returns the stored checkpoint once step 1 has
// committed, or nil if the task ended before that.
func checkpointAfterFirstStep(t *testing.T, h *Host, id string) []byte {
	t.Helper()
	var cp []byte
	testwait.Until(t, 15*time.Second, "first step", func() bool {
		task, err := h.Runner.Get(context.Background(), alice, id)
		if err != nil {
			t.Fatal(err)
		}
		cp = task.Checkpoint
		return cp != nil || task.Status != store.StatusRunning
	})
	return cp
}

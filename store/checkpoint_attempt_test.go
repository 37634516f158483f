package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// The attempt that wrote the checkpoint is recorded with it, in the same
// statement; an outcome without a checkpoint keeps both.
func TestFinishRecordsCheckpointAttempt(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		s := open(t)
		task, a := claimedTask(t, s, "p", "t1")
		if task.CheckpointAttempt != 0 {
			t.Fatalf("new task: checkpoint_attempt = %d, want 0", task.CheckpointAttempt)
		}
		finish := func(n int64, cp []byte) FinishAttempt {
			return FinishAttempt{PrincipalID: "p", TaskID: "t1", RunID: task.RunID, Number: n,
				Status: AttemptCompleted, Outcome: "continue", Checkpoint: cp}
		}
		steps := []struct {
			cp         []byte
			wantCP     string
			wantNumber int64
		}{
			{[]byte("cp-1"), "cp-1", 1},
			{nil, "cp-1", 1}, // no checkpoint: attempt 1's is kept, and so is its number
			{[]byte("cp-3"), "cp-3", 3},
		}
		for i, st := range steps {
			got, next, _, err := s.FinishAndClaim(ctx, finish(a.Number, st.cp), NewEvent{Type: "step.started"})
			if err != nil {
				t.Fatalf("step %d: %v", i+1, err)
			}
			if string(got.Checkpoint) != st.wantCP || got.CheckpointAttempt != st.wantNumber {
				t.Fatalf("after attempt %d: checkpoint %q of attempt %d, want %q of attempt %d",
					a.Number, got.Checkpoint, got.CheckpointAttempt, st.wantCP, st.wantNumber)
			}
			if g := getTask(t, s, "p", "t1"); g.CheckpointAttempt != st.wantNumber {
				t.Fatalf("GetTask after attempt %d: checkpoint_attempt %d, want %d", a.Number, g.CheckpointAttempt, st.wantNumber)
			}
			a = *next
		}
		// A failed attempt that ends the task keeps the last checkpoint's number.
		f := finish(a.Number, nil)
		f.Status, f.Outcome, f.TaskTo, f.TaskReason = AttemptFailed, "fail", StatusFailed, ReasonExecutorFailed
		got, err := s.FinishAttempt(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Checkpoint) != "cp-3" || got.CheckpointAttempt != 3 {
			t.Fatalf("after a failed attempt: checkpoint %q of attempt %d, want cp-3 of attempt 3", got.Checkpoint, got.CheckpointAttempt)
		}
		list, err := s.ListTasks(ctx, "p", ListQuery{})
		if err != nil || len(list) != 1 || list[0].CheckpointAttempt != 3 {
			t.Fatalf("listed: %+v, %v; want checkpoint_attempt 3", list, err)
		}
	})
}

// envelope builds a sealed-checkpoint-shaped blob with the given JSON header,
// as host/checkpoint.go lays it out (the store never checks its MAC).
func envelope(header string, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString(envelopeMagic)
	b.Write(binary.AppendUvarint(nil, uint64(len(header))))
	b.WriteString(header)
	b.Write(payload)
	return b.Bytes()
}

func sealedHeader(attempt int64) string {
	return fmt.Sprintf(`{"task_id":"t","principal_id":"p","executor":"legacy","schema":"s/1","attempt":%d,"sha256":"%s","mac":"%s"}`,
		attempt, strings.Repeat("a", 64), strings.Repeat("b", 64))
}

// A v2 store with checkpointed tasks migrates to v3 with each task's
// checkpoint_attempt read from its envelope; a checkpoint that is not a
// readable envelope gets 0, which no envelope matches (it fails closed).
func TestMigrateV3BackfillsCheckpointAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := sqliteAtVersion(t, 2)
	atLimit := sealedHeader(7)
	atLimit = atLimit[:len(atLimit)-1] + `,"x":"` + strings.Repeat("y", maxEnvelopeHeader-len(atLimit)-7) + `"}`
	if len(atLimit) != maxEnvelopeHeader {
		t.Fatalf("header at limit is %d bytes", len(atLimit))
	}
	pastLimit := atLimit[:len(atLimit)-2] + `y"}`
	cases := []struct {
		name string
		cp   []byte
		want int64
	}{
		{"no checkpoint", nil, 0},
		{"envelope of attempt 5", envelope(sealedHeader(5), []byte(`{"done":4}`)), 5},
		{"envelope with a 300 KiB payload", envelope(sealedHeader(12), bytes.Repeat([]byte("z"), 300<<10)), 12},
		{"header at the 4096-byte limit", envelope(atLimit, nil), 7},
		{"header past the limit", envelope(pastLimit, nil), 0},
		{"not an envelope", []byte(`{"done":4}`), 0},
		{"header not JSON", envelope(`{"attempt":`, nil), 0},
		{"attempt 0", envelope(sealedHeader(0), nil), 0},
		{"negative attempt", envelope(sealedHeader(-2), nil), 0},
		{"truncated header", envelope(sealedHeader(5), nil)[:40], 0},
	}
	for i, tc := range cases {
		if _, err := db.ExecContext(ctx, `INSERT INTO tasks (id, principal_id, executor, spec, status, steps_limit, tool_calls_limit,
			model_calls_limit, depth_limit, wall_ms_limit, checkpoint, created_ns, updated_ns)
			VALUES ($1, 'p', 'legacy', x'7b7d', 'interrupted', 10, 0, 0, 0, 1000, $2, 1, 1)`, fmt.Sprintf("t%d", i), tc.cp); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	db.Close()

	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, tc := range cases {
		got := getTask(t, s, "p", fmt.Sprintf("t%d", i))
		if got.CheckpointAttempt != tc.want || !bytes.Equal(got.Checkpoint, tc.cp) {
			t.Errorf("%s: checkpoint_attempt %d (checkpoint kept: %v), want %d", tc.name, got.CheckpointAttempt, bytes.Equal(got.Checkpoint, tc.cp), tc.want)
		}
	}
}

package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/taskhost/taskhost/internal/testfs"
	"github.com/taskhost/taskhost/internal/testwait"

	"github.com/taskhost/taskhost/store"
)

// The disk under the store fills while a step runs: the outcome cannot be
// written. The run retries, then decides: the plugin is stopped, readers
// and watchers see the task interrupted (store_error) at once, creates are
// refused naming the cause, and the decision lands in the store as soon as
// space is back; the task then resumes to completion.
// The first write refused is the step's outcome, or, when the step makes
// a tool call after the disk filled, that call's admission.
func TestStoreFullDiskInterruptsAndRecordsWhenSpaceReturns(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		te   map[string]any
	}{
		{"outcome write", nil},
		{"effect write", map[string]any{"wait_first": true, "call_tool": map[string]any{"name": "time.sleep", "args": map[string]any{"seconds": 0}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { testStoreFullDisk(t, tc.te) })
	}
}

func testStoreFullDisk(t *testing.T, extra map[string]any) {
	dir := testfs.MountTmpfs(t, testwait.ShortTempDir(t), 32<<20)
	h := openHost(t, dir, nil)
	ctl := testwait.PluginDir(t) // off the full disk
	release, pidFile := filepath.Join(ctl, "release"), filepath.Join(ctl, "pid")
	te := map[string]any{"steps": 2, "wait_file": release, "pid_file": pidFile}
	for k, v := range extra {
		te[k] = v
	}
	task := create(t, h, alice, te, Limits{})
	pid := readPid(t, pidFile)
	ctx := context.Background()
	evs, err := h.Store.Events(ctx, alice, task.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan error, 1)
	go func() {
		_, err := h.Runner.Events(ctx, alice, task.ID, evs[len(evs)-1].Seq)
		watched <- err
	}()

	filler := testfs.FillDisk(t, dir)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	var seen store.Task
	testwait.Until(t, 15*time.Second, "the task to show interrupted (store_error)", func() bool {
		seen, err = h.Runner.Get(ctx, alice, task.ID)
		return err == nil && seen.Status == store.StatusInterrupted
	})
	wantStatus(t, seen, store.StatusInterrupted, store.ReasonStoreError)
	if !strings.Contains(seen.Message, "store_degraded") || !strings.Contains(seen.Message, "disk full") {
		t.Errorf("message = %q, want store_degraded and the cause class", seen.Message)
	}
	if raw, err := h.Store.GetTask(ctx, alice, task.ID); err != nil || raw.Status != store.StatusRunning {
		t.Fatalf("stored task = %s, %v; want still running while the disk is full", raw.Status, err)
	}
	if err := h.Runner.StoreDegraded(); err == nil || !strings.Contains(err.Error(), task.ID) || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("StoreDegraded while the end is not recorded = %v, want the task and the cause", err)
	}
	// Counts agree with what Get shows, not with the unwritten row.
	for st, want := range map[store.Status]int64{store.StatusRunning: 0, store.StatusInterrupted: 1} {
		if n, err := h.Runner.Count(ctx, alice, store.ListQuery{Status: []store.Status{st}}); err != nil || n != want {
			t.Errorf("Count(%s) while degraded = %d, %v; want %d", st, n, err, want)
		}
	}
	if n, err := h.Runner.Count(ctx, alice, store.ListQuery{}); err != nil || n != 1 {
		t.Errorf("Count(all) while degraded = %d, %v; want 1", n, err)
	}
	select {
	case err := <-watched:
		if err != nil {
			t.Fatalf("a watcher waiting for events got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a watcher waiting for events was not woken by the store failure")
	}
	waitGone(t, pid, 10*time.Second)

	_, err = h.Runner.Create(ctx, alice, CreateRequest{Executor: "testexec", Spec: spec(t, "more", nil)})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "store unavailable: disk full") {
		t.Fatalf("create on a full disk: err = %v, want store unavailable: disk full", err)
	}
	if _, err := h.Runner.Resume(ctx, alice, task.ID); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("resume before the end is recorded: err = %v, want store unavailable", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := h.Runner.Wait(wctx, task.ID); err != nil {
		t.Fatalf("the run did not end once space came back: %v", err)
	}
	stored, err := h.Store.GetTask(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, stored, store.StatusInterrupted, store.ReasonStoreError)
	if err := h.Runner.StoreDegraded(); err != nil {
		t.Errorf("StoreDegraded once the end is recorded = %v, want nil", err)
	}
	if strings.Contains(stored.Message, "store_degraded") {
		t.Errorf("recorded message %q still says degraded", stored.Message)
	}
	atts, err := h.Store.ListAttempts(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 1 || atts[0].Status != store.AttemptInterrupted || atts[0].Reason != store.ReasonStoreError {
		t.Fatalf("attempts = %+v, want one interrupted (store_error)", atts)
	}
	if stored.Budgets.ToolCalls.Used != 0 {
		t.Errorf("tool calls used = %d: an effect the store refused is not charged", stored.Budgets.ToolCalls.Used)
	}
	if effs, err := h.Store.ListEffects(ctx, alice, task.ID); err != nil || len(effs) != 0 {
		t.Errorf("ledger = %+v, %v; want nothing of the refused write", effs, err)
	}
	all, err := h.Store.Events(ctx, alice, task.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if last := all[len(all)-1]; last.Type != EventTaskInterrupted || !strings.Contains(string(last.Payload), `"reason":"store_error"`) {
		t.Fatalf("last event = %s %s, want task.interrupted (store_error)", last.Type, last.Payload)
	}

	if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatalf("resume after space came back: %v", err)
	}
	done := waitEnd(t, h, alice, task.ID)
	wantStatus(t, done, store.StatusCompleted, "")
	if done.Budgets.Steps.Used != 3 {
		t.Errorf("steps used = %d, want 3 (the unrecorded attempt still costs)", done.Budgets.Steps.Used)
	}
}

// The host stops while the disk is still full: the run's decision never
// reached the store, which still says running; the next start recovers
// the task as interrupted (host_restart) like any other, and it resumes.
func TestStoreFullDiskThenHostStopRecoversOnRestart(t *testing.T) {
	t.Parallel()
	dir := testfs.MountTmpfs(t, testwait.ShortTempDir(t), 32<<20)
	h := openHost(t, dir, nil)
	ctl := testwait.PluginDir(t)
	release := filepath.Join(ctl, "release")
	task := create(t, h, alice, map[string]any{"steps": 1, "wait_file": release, "pid_file": filepath.Join(ctl, "pid")}, Limits{})
	readPid(t, filepath.Join(ctl, "pid"))
	ctx := context.Background()
	filler := testfs.FillDisk(t, dir)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 15*time.Second, "the task to show store_error", func() bool {
		got, err := h.Runner.Get(ctx, alice, task.ID)
		return err == nil && got.Reason == store.ReasonStoreError
	})
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	h.Close(cctx) // its own writes fail too; that is the point
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	h2 := openHost(t, dir, nil)
	got, err := h2.Runner.Get(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, store.StatusInterrupted, store.ReasonHostRestart)
	if _, err := h2.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h2, alice, task.ID), store.StatusCompleted, "")
}

// A run write the store refuses as unavailable is retried storeRetries
// times, the waits doubling from storeRetryFirst; any other error, and a
// host stopping, end the retries at once.
func TestRetryWriteBacksOffThenGivesUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		unavailable := fmt.Errorf("disk full: %w", store.ErrUnavailable)
		ru := &run{r: &Runner{stopped: make(chan struct{})}}
		var at []time.Duration
		start := time.Now()
		err := ru.retryWrite(func() error {
			at = append(at, time.Since(start))
			return unavailable
		})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("retryWrite = %v, want the store's unavailable error", err)
		}
		var want []time.Duration
		for i, d := 0, time.Duration(0); i <= storeRetries; i++ {
			want = append(want, d)
			d += storeRetryFirst << i
		}
		if !slices.Equal(at, want) {
			t.Errorf("writes at %v, want %v", at, want)
		}

		other := errors.New("constraint failed")
		n := 0
		if err := ru.retryWrite(func() error { n++; return other }); err != other || n != 1 {
			t.Errorf("a non-retryable error: %v after %d writes, want it after 1", err, n)
		}

		go func() {
			time.Sleep(storeRetryFirst + time.Millisecond)
			close(ru.r.stopped)
		}()
		n = 0
		start = time.Now()
		if err := ru.retryWrite(func() error { n++; return unavailable }); !errors.Is(err, store.ErrUnavailable) || n != 2 {
			t.Errorf("a stopping host: %v after %d writes, want the error after 2", err, n)
		}
		if d := time.Since(start); d != storeRetryFirst+time.Millisecond {
			t.Errorf("the retries ended %v after they began, want at the stop (%v)", d, storeRetryFirst+time.Millisecond)
		}
	})
}

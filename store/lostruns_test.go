package store

import (
	"context"
	"reflect"
	"testing"
)

// A host lists only its own live runs, and InterruptRuns ends exactly the
// runs it is given that are still live in that run on this host: a run
// resumed since (a newer epoch), a task another host holds and a task that
// ended are left alone. An interrupted run's attempt is closed, its
// effect in flight becomes indeterminate and its approval is cancelled, as
// a crash's would be, in one transaction with its events.
func TestInterruptLostRuns(t *testing.T) {
	t.Parallel()
	forFleetDrivers(t, func(t *testing.T, openFleet fleetOpen) {
		ctx := context.Background()
		_, hs := openFleet("host-a", "host-b")
		a, b := hs[0], hs[1]
		lost, att := claimedTask(t, a, "p", "lost")
		if _, _, err := a.AdmitEffect(ctx, NewEffect{PrincipalID: "p", TaskID: "lost", RunID: lost.RunID, Attempt: att.Number, Seq: 1,
			Kind: EffectTool, Fingerprint: "fp"}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.MarkEffect(ctx, MarkEffect{PrincipalID: "p", TaskID: "lost", Attempt: att.Number, Seq: 1, From: EffectAdmitted, To: EffectDispatching}); err != nil {
			t.Fatal(err)
		}
		resumed := runningTask(t, a, "p", "resumed")
		other := runningTask(t, b, "q", "other")
		ended := runningTask(t, a, "p", "ended")
		if _, err := a.Cancel(ctx, "p", "ended"); err != nil {
			t.Fatal(err)
		}

		refs, err := a.LeasedRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []RunRef{{"p", "lost", lost.RunID}, {"p", "resumed", resumed.RunID}}
		if !reflect.DeepEqual(refs, want) {
			t.Fatalf("LeasedRuns = %v, want %v", refs, want)
		}
		// Stale refs: "resumed" as of an older epoch, "other" held by B,
		// "ended" no longer live.
		stale := []RunRef{{"p", "lost", lost.RunID}, {"p", "resumed", resumed.RunID - 1}, {"q", "other", other.RunID}, {"p", "ended", ended.RunID}}
		ids, err := a.InterruptRuns(ctx, stale, ReasonRunLost, "lost", 1000, lostEvents)
		if err != nil || !reflect.DeepEqual(ids, []string{"lost"}) {
			t.Fatalf("InterruptRuns = %v, %v; want [lost]", ids, err)
		}
		if got := getTask(t, a, "p", "lost"); got.Status != StatusInterrupted || got.Reason != ReasonRunLost || got.RunID != lost.RunID {
			t.Fatalf("lost task: %s (%s) run %d", got.Status, got.Reason, got.RunID)
		}
		if as := listAttempts(t, a, "p", "lost"); as[len(as)-1].Status != AttemptInterrupted || as[len(as)-1].Reason != ReasonRunLost {
			t.Fatalf("lost task's attempt: %+v", as[len(as)-1])
		}
		effs, err := a.ListEffects(ctx, "p", "lost")
		if err != nil || len(effs) != 1 || effs[0].Status != EffectIndeterminate {
			t.Fatalf("effects %+v, %v: want one indeterminate", effs, err)
		}
		for _, c := range []struct {
			s         *Store
			principal string
			id        string
			status    Status
		}{{a, "p", "resumed", StatusRunning}, {b, "q", "other", StatusRunning}, {a, "p", "ended", StatusCancelled}} {
			if got := getTask(t, c.s, c.principal, c.id); got.Status != c.status {
				t.Errorf("task %s: %s, want %s untouched", c.id, got.Status, c.status)
			}
		}
		if evs := allEvents(t, a, "p", "lost"); evs[len(evs)-1].Type != "task.interrupted" {
			t.Errorf("last event of the lost task: %s", evs[len(evs)-1].Type)
		}
	})
}

// InterruptRuns refuses what it cannot do before touching the store.
func TestInterruptRunsRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx := context.Background()
	if _, err := s.InterruptRuns(ctx, nil, Reason("nope"), "", 0, nil); err == nil {
		t.Error("unknown reason accepted")
	}
	if _, err := s.InterruptRuns(ctx, make([]RunRef, MaxLeasedRuns+1), ReasonRunLost, "", 0, nil); err == nil {
		t.Errorf("%d runs accepted, limit %d", MaxLeasedRuns+1, MaxLeasedRuns)
	}
	if _, err := s.InterruptRuns(ctx, make([]RunRef, MaxLeasedRuns), ReasonRunLost, "", 0, nil); err != nil {
		t.Errorf("%d runs (the limit) refused: %v", MaxLeasedRuns, err)
	}
	if _, err := s.InterruptRuns(ctx, nil, ReasonRunLost, "", -1, nil); err == nil {
		t.Error("negative wall charge accepted")
	}
	if _, err := s.InterruptRuns(ctx, nil, ReasonRunLost, string(make([]byte, DefaultLimits().Message+1)), 0, nil); err == nil {
		t.Error("message past the limit accepted")
	}
}

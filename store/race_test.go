package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestCancelRacesComplete races a step's completion against a user's cancel
// on the same task, many times: whichever commits first wins, the other gets
// a typed conflict, and the task ends as exactly one of the two.
func TestCancelRacesComplete(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		const rounds = 1000
		s := open(t)
		ctx := context.Background()
		wins := map[Status]int{}
		for i := range rounds {
			id := fmt.Sprintf("race-%04d", i)
			task, a := claimedTask(t, s, "p", id)

			start := make(chan struct{})
			var wg sync.WaitGroup
			var finishErr, cancelErr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				_, finishErr = s.FinishAttempt(ctx, FinishAttempt{
					PrincipalID: "p", TaskID: id, RunID: task.RunID, Number: a.Number,
					Status: AttemptCompleted, Outcome: "complete", Summary: "done",
					Result: []byte(`{"answer":42}`), Checkpoint: []byte("ckpt"), WallMillisUsed: 5,
					TaskTo: StatusCompleted, Events: []NewEvent{{Type: "task.completed"}},
				})
			}()
			go func() {
				defer wg.Done()
				<-start
				_, cancelErr = s.Cancel(ctx, "p", id, NewEvent{Type: "task.cancelled"})
			}()
			close(start)
			wg.Wait()

			if (finishErr == nil) == (cancelErr == nil) {
				t.Fatalf("round %d: finish err %v, cancel err %v: want exactly one winner", i, finishErr, cancelErr)
			}
			loser := finishErr
			want := StatusCancelled
			if finishErr == nil {
				loser, want = cancelErr, StatusCompleted
			}
			var te *TransitionError
			if !errors.Is(loser, ErrConflict) || !errors.As(loser, &te) || te.Current != want {
				t.Fatalf("round %d: loser error %v, want *TransitionError with current %s", i, loser, want)
			}
			got := getTask(t, s, "p", id)
			if got.Status != want {
				t.Fatalf("round %d: status %s, want %s", i, got.Status, want)
			}
			wins[want]++

			types := map[string]int{}
			for _, e := range allEvents(t, s, "p", id) {
				types[e.Type]++
			}
			as := listAttempts(t, s, "p", id)
			switch want {
			case StatusCompleted:
				if got.Reason != ReasonNone || string(got.Result) != `{"answer":42}` || as[0].Status != AttemptCompleted ||
					types["task.completed"] != 1 || types["task.cancelled"] != 0 {
					t.Fatalf("round %d: completed task %+v, attempts %+v, events %v", i, got, as, types)
				}
			case StatusCancelled:
				// The losing finish wrote nothing: no result, no checkpoint, no
				// wall time, the attempt still open for the runner to abandon.
				if got.Reason != ReasonUserCancelled || got.Result != nil || got.Checkpoint != nil ||
					got.Budgets.WallMillis.Used != 0 || as[0].Status != AttemptRunning ||
					types["task.completed"] != 0 || types["task.cancelled"] != 1 {
					t.Fatalf("round %d: cancelled task %+v, attempts %+v, events %v", i, got, as, types)
				}
				if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: id, Number: a.Number, Status: AttemptCancelled, Reason: ReasonUserCancelled, WallMillisUsed: 5}); err != nil {
					t.Fatalf("round %d: AbandonAttempt: %v", i, err)
				}
			}
		}
		t.Logf("%d rounds: completed won %d, cancelled won %d", rounds, wins[StatusCompleted], wins[StatusCancelled])
	})
}

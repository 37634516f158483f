package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// jsonOfSize is a JSON object of exactly n bytes (n >= 8).
func jsonOfSize(n int) []byte {
	return []byte(`{"p":"` + strings.Repeat("x", n-8) + `"}`)
}

func TestDefaultLimits(t *testing.T) {
	t.Parallel()
	want := Limits{Spec: 16384, Summary: 2000, Message: 2000, Checkpoint: 256*1024 + 4*1024,
		Result: 64 * 1024, EventPayload: 1024, EventsPerTask: 500, StderrTail: 4096,
		WorkspaceBytes: 64 << 20, WorkspaceFiles: 65536}
	if got := DefaultLimits(); got != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", got, want)
	}
	if got := (Limits{Summary: 7}).withDefaults(); got.Summary != 7 || got.Spec != want.Spec {
		t.Fatalf("withDefaults keeps set fields and fills the rest: %+v", got)
	}
}

// TestFieldLimits stores every bounded field at its limit (accepted) and one
// byte past it (a *LimitError naming the field, nothing written).
func TestFieldLimits(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		lim := DefaultLimits()
		finish := func(task Task, a Attempt, mod func(*FinishAttempt)) error {
			f := FinishAttempt{PrincipalID: task.PrincipalID, TaskID: task.ID, RunID: task.RunID, Number: a.Number,
				Status: AttemptCompleted, Outcome: "continue"}
			mod(&f)
			_, err := s.FinishAttempt(ctx, f)
			return err
		}
		tests := []struct {
			field string
			limit int
			call  func(task Task, a Attempt, n int) error
			// stored reads back the stored size of the field after success.
			stored func(task Task) int
		}{
			{"summary", lim.Summary, func(task Task, a Attempt, n int) error {
				return finish(task, a, func(f *FinishAttempt) { f.Summary = strings.Repeat("s", n) })
			}, func(task Task) int { return len(listAttempts(t, s, "p", task.ID)[0].Summary) }},
			{"message", lim.Message, func(task Task, a Attempt, n int) error {
				return finish(task, a, func(f *FinishAttempt) { f.Status, f.Message = AttemptFailed, strings.Repeat("m", n) })
			}, func(task Task) int { return len(listAttempts(t, s, "p", task.ID)[0].Message) }},
			{"message", lim.Message, func(task Task, a Attempt, n int) error {
				return finish(task, a, func(f *FinishAttempt) {
					f.TaskTo, f.TaskReason, f.TaskMessage = StatusFailed, ReasonExecutorFailed, strings.Repeat("m", n)
				})
			}, func(task Task) int { return len(getTask(t, s, "p", task.ID).Message) }},
			{"message", lim.Message, func(task Task, a Attempt, n int) error {
				_, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: task.ID, From: []Status{StatusRunning}, To: StatusFailed, Reason: ReasonExecutorFailed, Message: strings.Repeat("m", n)})
				return err
			}, func(task Task) int { return len(getTask(t, s, "p", task.ID).Message) }},
			{"stderr_tail", lim.StderrTail, func(task Task, a Attempt, n int) error {
				return finish(task, a, func(f *FinishAttempt) {
					f.Status, f.Reason, f.StderrTail = AttemptInterrupted, ReasonExecutorCrashed, strings.Repeat("e", n)
				})
			}, func(task Task) int { return len(listAttempts(t, s, "p", task.ID)[0].StderrTail) }},
			{"checkpoint", lim.Checkpoint, func(task Task, a Attempt, n int) error {
				return finish(task, a, func(f *FinishAttempt) { f.Checkpoint = bytes.Repeat([]byte{7}, n) })
			}, func(task Task) int { return len(getTask(t, s, "p", task.ID).Checkpoint) }},
			{"result", lim.Result, func(task Task, a Attempt, n int) error {
				return finish(task, a, func(f *FinishAttempt) {
					f.Outcome, f.TaskTo, f.Result = "complete", StatusCompleted, jsonOfSize(n)
				})
			}, func(task Task) int { return len(getTask(t, s, "p", task.ID).Result) }},
			{"event payload", lim.EventPayload, func(task Task, a Attempt, n int) error {
				_, err := s.AppendEvents(ctx, "p", task.ID, task.RunID, NewEvent{Type: "step.progress", Payload: jsonOfSize(n)})
				return err
			}, func(task Task) int { evs := allEvents(t, s, "p", task.ID); return len(evs[len(evs)-1].Payload) }},
			{"event payload", lim.EventPayload, func(task Task, a Attempt, n int) error {
				return finish(task, a, func(f *FinishAttempt) {
					f.Events = []NewEvent{{Type: "step.completed"}, {Type: "x", Payload: jsonOfSize(n)}}
				})
			}, func(task Task) int { evs := allEvents(t, s, "p", task.ID); return len(evs[len(evs)-1].Payload) }},
		}
		for i, tt := range tests {
			t.Run(fmt.Sprintf("%s#%d", tt.field, i), func(t *testing.T) {
				task, a := claimedTask(t, s, "p", fmt.Sprintf("limit-%d", i))
				before := snap(t, s, "p", task.ID)
				err := tt.call(task, a, tt.limit+1)
				var le *LimitError
				if !errors.As(err, &le) || !errors.Is(err, ErrTooLarge) {
					t.Fatalf("one past the limit: %v, want *LimitError", err)
				}
				if *le != (LimitError{Field: tt.field, Limit: tt.limit, Got: tt.limit + 1}) {
					t.Fatalf("LimitError = %+v", le)
				}
				if after := snap(t, s, "p", task.ID); !reflect.DeepEqual(after, before) {
					t.Fatal("a refused value was written")
				}
				if err := tt.call(task, a, tt.limit); err != nil {
					t.Fatalf("at the limit: %v", err)
				}
				if got := tt.stored(task); got != tt.limit {
					t.Fatalf("stored %d bytes, want %d", got, tt.limit)
				}
			})
		}

		t.Run("spec", func(t *testing.T) {
			nt := NewTask{ID: "spec-past", PrincipalID: "p", Executor: "legacy", Spec: jsonOfSize(lim.Spec + 1)}
			_, err := s.CreateTask(ctx, nt, NewEvent{Type: "task.created"})
			var le *LimitError
			if !errors.As(err, &le) || le.Field != "spec" || le.Limit != lim.Spec || le.Got != lim.Spec+1 {
				t.Fatalf("spec one past the limit: %v", err)
			}
			if _, err := s.GetTask(ctx, "p", "spec-past"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("refused task was stored: %v", err)
			}
			nt.ID, nt.Spec = "spec-at", jsonOfSize(lim.Spec)
			if task, err := s.CreateTask(ctx, nt); err != nil || len(task.Spec) != lim.Spec {
				t.Fatalf("spec at the limit: %v", err)
			}
		})
	})
}

// TestConfiguredLimits checks that Options.Limits replaces the defaults.
func TestConfiguredLimits(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t, func(o *Options) { o.Limits = Limits{Summary: 10, EventsPerTask: 3} })
		task, a := claimedTask(t, s, "p", "t")
		_, err := s.FinishAttempt(context.Background(), FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID,
			Number: a.Number, Status: AttemptCompleted, Outcome: "continue", Summary: "eleven byte"})
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != 10 {
			t.Fatalf("configured summary limit: %v", err)
		}
		for range 5 {
			if _, err := s.AppendEvents(context.Background(), "p", "t", task.RunID, NewEvent{Type: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(allEvents(t, s, "p", "t")); n != 3 {
			t.Fatalf("%d events kept, want 3", n)
		}
	})
}

func TestEventRetention(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		keep := DefaultLimits().EventsPerTask
		task := runningTask(t, s, "p", "t") // 2 events: task.created, task.started
		other := runningTask(t, s, "p", "other")

		var appended []Event
		for i := range keep - 1 { // now keep+1 in all: the oldest must go
			evs, err := s.AppendEvents(ctx, "p", "t", task.RunID, NewEvent{Type: "n", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
			if err != nil {
				t.Fatal(err)
			}
			appended = append(appended, evs...)
		}
		got := allEvents(t, s, "p", "t")
		if len(got) != keep || got[0].Type != "task.started" || got[len(got)-1].Seq != appended[len(appended)-1].Seq {
			t.Fatalf("after %d events: %d kept, first %s", keep+1, len(got), got[0].Type)
		}

		// One call appending more than the window keeps only the newest.
		batch := make([]NewEvent, keep+20)
		for i := range batch {
			batch[i] = NewEvent{Type: "b", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
		}
		appended, err := s.AppendEvents(ctx, "p", "t", task.RunID, batch...)
		if err != nil {
			t.Fatal(err)
		}
		got = allEvents(t, s, "p", "t")
		if len(got) != keep || !reflect.DeepEqual(got, appended[len(appended)-keep:]) {
			t.Fatalf("after a batch: %d kept; want the newest %d as returned", len(got), keep)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Seq <= got[i-1].Seq {
				t.Fatalf("seq not increasing: %d then %d", got[i-1].Seq, got[i].Seq)
			}
		}
		// Retention is per task.
		if n := len(allEvents(t, s, "p", other.ID)); n != 2 {
			t.Fatalf("another task's events were trimmed: %d left", n)
		}
	})
}

func TestEventPayloads(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task := runningTask(t, s, "p", "t")
		tests := []struct {
			name    string
			payload []byte
			want    error
			stored  string
		}{
			{"nil is an empty object", nil, nil, `{}`},
			{"object", []byte(`{"steps":"3/20"}`), nil, `{"steps":"3/20"}`},
			{"leading space", []byte(` {"a":1}`), nil, ` {"a":1}`},
			{"array", []byte(`[1,2]`), ErrInvalid, ""},
			{"string", []byte(`"x"`), ErrInvalid, ""},
			{"two objects", []byte(`{}{}`), ErrInvalid, ""},
			{"broken", []byte(`{"a":`), ErrInvalid, ""},
			{"1024 bytes", jsonOfSize(1024), nil, string(jsonOfSize(1024))},
			{"1025 bytes", jsonOfSize(1025), ErrTooLarge, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				before := allEvents(t, s, "p", "t")
				evs, err := s.AppendEvents(ctx, "p", "t", task.RunID, NewEvent{Type: "x", Payload: tt.payload})
				if tt.want != nil {
					wantErrIs(t, err, tt.want)
					if after := allEvents(t, s, "p", "t"); !reflect.DeepEqual(after, before) {
						t.Fatal("refused event was stored")
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				got := allEvents(t, s, "p", "t")
				last := got[len(got)-1]
				if string(last.Payload) != tt.stored || !reflect.DeepEqual(last, evs[0]) || last.RunID != task.RunID {
					t.Fatalf("stored %+v, returned %+v", last, evs[0])
				}
			})
		}
		// Events of a run that is over are refused.
		if _, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "t", From: []Status{StatusRunning}, To: StatusInterrupted, Reason: ReasonHostShutdown}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartRun(ctx, "p", "t", StatusInterrupted); err != nil {
			t.Fatal(err)
		}
		var te *TransitionError
		if _, err := s.AppendEvents(ctx, "p", "t", task.RunID, NewEvent{Type: "late"}); !errors.As(err, &te) || te.WantRunID != task.RunID {
			t.Fatalf("event for an old run: %v", err)
		}
	})
}

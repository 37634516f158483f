package api

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// fakeEffects resolves effect 1/1 of task t1 once; every other key is
// ErrNotFound, a second resolution ErrConflict.
type fakeEffects struct {
	resolved map[string]store.Effect
	by       string
}

func (f *fakeEffects) UnsettledEffects(_ context.Context, principal, id string) ([]store.Effect, error) {
	e, ok := f.resolved[id]
	if !ok {
		e = store.Effect{Attempt: 1, Seq: 1, Status: store.EffectIndeterminate, Summary: "shell.run", Resolution: store.ResolutionUnsettled}
	}
	return []store.Effect{e}, nil
}

func (f *fakeEffects) ResolveEffect(_ context.Context, principal, id string, attempt, seq int64, to store.EffectResolution, operator string) (store.Effect, error) {
	if id != "t1" || attempt != 1 || seq != 1 {
		return store.Effect{}, fmt.Errorf("task %s has no effect %d/%d: %w", id, attempt, seq, store.ErrNotFound)
	}
	if _, ok := f.resolved[id]; ok {
		return store.Effect{}, fmt.Errorf("already resolved: %w", store.ErrConflict)
	}
	f.by = operator
	e := store.Effect{Attempt: 1, Seq: 1, Status: store.EffectIndeterminate, Summary: "shell.run", Resolution: to, ResolvedBy: "operator:" + operator}
	f.resolved[id] = e
	return e, nil
}

// ResolveEffect checks its arguments before the backend sees them, maps
// the ledger's refusals to the API's codes, and GetTask lists the task's
// unsettled effects; without an Effects backend it is Unimplemented.
func TestResolveEffectAPI(t *testing.T) {
	fe := &fakeEffects{resolved: map[string]store.Effect{}}
	ts := startServer(t, func(o *Options) { o.Effects = fe })
	ts.fake.add(self, "t1", store.StatusInterrupted)
	c := apipb.NewTaskServiceClient(ts.unixConn(t))
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		req    *apipb.ResolveEffectRequest
		code   codes.Code
		reason string
	}{
		{"attempt 0", &apipb.ResolveEffectRequest{TaskId: "t1", Attempt: 0, Seq: 1, Resolution: "abandoned"}, codes.InvalidArgument, ReasonInvalidArgument},
		{"seq 0", &apipb.ResolveEffectRequest{TaskId: "t1", Attempt: 1, Seq: 0, Resolution: "abandoned"}, codes.InvalidArgument, ReasonInvalidArgument},
		{"unknown resolution", &apipb.ResolveEffectRequest{TaskId: "t1", Attempt: 1, Seq: 1, Resolution: "unsettled"}, codes.InvalidArgument, ReasonInvalidArgument},
		{"long resolution", &apipb.ResolveEffectRequest{TaskId: "t1", Attempt: 1, Seq: 1, Resolution: strings.Repeat("x", 10000)}, codes.InvalidArgument, ReasonInvalidArgument},
		{"no task id", &apipb.ResolveEffectRequest{Attempt: 1, Seq: 1, Resolution: "abandoned"}, codes.InvalidArgument, ReasonInvalidArgument},
		{"no such effect", &apipb.ResolveEffectRequest{TaskId: "t1", Attempt: 1, Seq: 9, Resolution: "abandoned"}, codes.NotFound, ReasonNotFound},
		{"resolved", &apipb.ResolveEffectRequest{TaskId: "t1", Attempt: 1, Seq: 1, Resolution: "retry_authorized"}, codes.OK, ""},
		{"twice", &apipb.ResolveEffectRequest{TaskId: "t1", Attempt: 1, Seq: 1, Resolution: "abandoned"}, codes.FailedPrecondition, ReasonTaskConflict},
	} {
		resp, err := c.ResolveEffect(ctx, tc.req)
		if tc.code == codes.OK {
			if err != nil || resp.Effect.GetResolution() != "retry_authorized" || fe.by != self {
				t.Fatalf("%s: %v, %v (by %q)", tc.name, resp, err, fe.by)
			}
			continue
		}
		wantCode(t, err, tc.code, tc.reason)
	}
	got, err := c.GetTask(ctx, &apipb.GetTaskRequest{TaskId: "t1"})
	if err != nil || len(got.UnsettledEffects) != 1 || got.UnsettledEffects[0].GetResolution() != "retry_authorized" {
		t.Fatalf("GetTask: %v, %v; want the effect retry_authorized", got.GetUnsettledEffects(), err)
	}

	bare := startServer(t)
	_, err = apipb.NewTaskServiceClient(bare.unixConn(t)).ResolveEffect(ctx, &apipb.ResolveEffectRequest{TaskId: "t1", Attempt: 1, Seq: 1, Resolution: "abandoned"})
	wantCode(t, err, codes.Unimplemented, ReasonInternal)
}

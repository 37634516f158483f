package host

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"sync"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
)

// turn is the identity of one step attempt in flight, named by its token.
type turn struct {
	taskID, principal string
	runID, attempt    int64
}

// turns maps live turn tokens to their step. A token is valid from the moment
// its step is sent until the step's outcome is known, and never again.
type turns struct {
	mu sync.Mutex
	m  map[string]*turnState
}

func newTurns() *turns { return &turns{m: map[string]*turnState{}} }

// issue names a step in flight, which may have parallel model calls in
// flight at once. Its state's context is derived from ctx, the step's: a
// cancel of the run reaches the step's effects (a running shell.run is
// killed) the moment it commits, not once the executor's step call has
// returned.
func (t *turns) issue(ctx context.Context, tr turn, parallel int) (string, *turnState) {
	tok := randomToken()
	ctx, cancel := context.WithCancel(ctx)
	ts := &turnState{turn: tr, ctx: ctx, cancel: cancel, modelSlots: newModelSlots(parallel)}
	t.mu.Lock()
	t.m[tok] = ts
	t.mu.Unlock()
	return tok, ts
}

func (t *turns) revoke(tok string) {
	t.mu.Lock()
	delete(t.m, tok)
	t.mu.Unlock()
}

func (t *turns) lookup(tok string) (*turnState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.m[tok]
	return ts, ok
}

// randomToken is 192 random bits, URL-safe.
func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// taskServices is the Services of one plugin process, bound to the
// one task that process serves.
type taskServices struct {
	r      *Runner
	taskID string
}

// authorizeState resolves a turn token for this endpoint's task. A token of
// a finished step or of another task is refused the same way, and logged.
func (s *taskServices) authorizeState(method, tok string) (*turnState, error) {
	ts, ok := s.r.turns.lookup(tok)
	if !ok || ts.taskID != s.taskID {
		s.r.log.Warn("host service call with an invalid turn token refused", "method", method, "task", s.taskID)
		return nil, plugin.Refuse(plugin.ErrNotAllowed, "turn token is not valid for a step of this task in flight")
	}
	return ts, nil
}

// Progress records a bounded note as a step.progress event.
func (s *taskServices) Progress(ctx context.Context, tok, note string) error {
	ts, err := s.authorizeState("Progress", tok)
	if err != nil {
		return err
	}
	if err := s.r.progress(ctx, ts.turn, note); err != nil {
		return fmt.Errorf("progress %w: %w", plugin.ErrNotRecorded, err)
	}
	return nil
}

// ListTools lists the enabled tools, for the executor to offer a model.
func (s *taskServices) ListTools(_ context.Context, tok string) ([]tools.Spec, error) {
	ts, err := s.authorizeState("ListTools", tok)
	if err != nil {
		return nil, err
	}
	if s.r.svc.Tools == nil {
		return nil, nil
	}
	return slices.DeleteFunc(s.r.svc.Tools.Specs(), func(t tools.Spec) bool { return !ts.opts.allows(t.Name) }), nil
}

package model

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/internal/text"
)

// maxPreflightMessage bounds the message a preflight result keeps.
const maxPreflightMessage = 300

// Status is what the host knows of its model provider's health: the
// result of the last preflight ([model] preflight), if any.
type Status struct {
	Provider  string // "scripted" or "openai"
	Name      string // the model name, for openai
	Preflight bool   // [model] preflight is on
	// Checked is when the last preflight ended; zero: none has yet.
	Checked time.Time
	OK      bool
	// Kind is the sdk.ModelErrorKind name of a failed preflight ("auth",
	// "timeout", ...); Message is the provider's words, bounded.
	Kind    string
	Message string
}

// Checker runs the model preflight and keeps its last result. Its
// methods are safe for concurrent use.
type Checker struct {
	provider Provider
	base     Status
	timeout  time.Duration
	log      hclog.Logger

	mu   sync.Mutex
	last Status
	// running is closed when the preflight in flight ends; nil when none is.
	running chan struct{}
}

func NewChecker(p Provider, base Status, timeout time.Duration, log hclog.Logger) *Checker {
	c := &Checker{provider: p, base: base, timeout: timeout, log: log, last: base}
	if _, ok := p.(Preflighter); base.Preflight && !ok {
		// Nothing to reach (the scripted provider): ok from the start, not
		// a preflight forever pending.
		c.last.Checked, c.last.OK = time.Now(), true
	}
	return c
}

// Status returns the last preflight's result.
func (c *Checker) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Check runs a preflight now and returns its result; with preflight off, or
// a provider that has none (scripted), it returns the status unchanged.
// Concurrent calls share one request.
func (c *Checker) Check(ctx context.Context) Status {
	pf, ok := c.provider.(Preflighter)
	if !c.base.Preflight || !ok {
		return c.Status()
	}
	c.mu.Lock()
	done := c.running
	leader := done == nil
	if leader {
		done = make(chan struct{})
		c.running = done
	}
	c.mu.Unlock()
	if !leader {
		select {
		case <-done:
		case <-ctx.Done():
		}
		return c.Status()
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	err := pf.Preflight(cctx)
	cancel()
	if ctx.Err() != nil {
		// The caller gave up (or the host is closing): that says nothing
		// of the provider, so the last result stands.
		c.mu.Lock()
		c.running = nil
		c.mu.Unlock()
		close(done)
		return c.Status()
	}
	st := c.base
	st.Checked, st.OK = time.Now(), err == nil
	if err != nil {
		st.Kind = KindOf(err).SDKName()
		st.Message = err.Error()
		if merr, ok := errors.AsType[*Error](err); ok {
			st.Message = merr.Message
		}
		st.Message = text.Truncate(st.Message, maxPreflightMessage)
		c.log.Warn("model preflight failed", "provider", st.Provider, "kind", st.Kind, "error", st.Message)
	} else {
		c.log.Info("model preflight ok", "provider", st.Provider)
	}
	c.mu.Lock()
	c.last, c.running = st, nil
	c.mu.Unlock()
	close(done)
	return st
}

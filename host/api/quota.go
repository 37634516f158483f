package api

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/store"
)

// quotas are the per-principal bounds the API keeps, so that one principal
// cannot take every slot the daemon has.
type quotas struct {
	mu      sync.Mutex
	watches map[string]int // open watch streams by principal
	// starting serialises a principal's count-then-start, so two racing
	// creates cannot both pass the count. Entries are never removed: the
	// principals are bounded by the config ([principals], [api.tokens]).
	starting map[string]*sync.Mutex
}

func newQuotas() *quotas {
	return &quotas{watches: map[string]int{}, starting: map[string]*sync.Mutex{}}
}

// quotaError is a ResourceExhausted naming the config key of the limit.
func quotaError(reason, key string, limit int, msg string) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("%s (%s = %d)", msg, key, limit))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain,
		Metadata: map[string]string{"limit": key, "value": strconv.Itoa(limit)}}); err == nil {
		st = d
	}
	return st.Err()
}

// acquireWatch takes one of p's watch slots, or refuses.
func (q *quotas) acquireWatch(p string, limit int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.watches[p] >= limit {
		return quotaError(ReasonWatchLimit, "api.max_watches_per_principal", limit,
			fmt.Sprintf("you already have %d watch streams open on this daemon; close one or retry later", q.watches[p]))
	}
	q.watches[p]++
	return nil
}

func (q *quotas) releaseWatch(p string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.watches[p]--; q.watches[p] <= 0 {
		delete(q.watches, p)
	}
}

func (q *quotas) lock(p string) func() {
	q.mu.Lock()
	m, ok := q.starting[p]
	if !ok {
		m = &sync.Mutex{}
		q.starting[p] = m
	}
	q.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// activeStatuses are the statuses that hold a run slot.
var activeStatuses = []store.Status{store.StatusPending, store.StatusRunning, store.StatusWaitingApproval}

// startWithin runs start (a create or a resume for p) unless p already has
// MaxRunningPerPrincipal active tasks. The count and the start are one step
// for p: p's other starts wait.
func (s *Server) startWithin(ctx context.Context, p string, start func() error) error {
	limit := s.opts.MaxRunningPerPrincipal
	if limit == 0 {
		return start()
	}
	unlock := s.quotas.lock(p)
	defer unlock()
	active, err := s.opts.Tasks.List(ctx, p, store.ListQuery{Status: activeStatuses, Limit: limit})
	if err != nil {
		return s.toStatus(ctx, err, "task", "")
	}
	if len(active) >= limit {
		return quotaError(ReasonRunningQuota, "tasks.max_running_per_principal", limit,
			fmt.Sprintf("you already have %d tasks pending, running or waiting for an approval; nothing was started: wait for one to end, or cancel one", len(active)))
	}
	return start()
}

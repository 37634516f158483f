package host

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// parallelModel is an OpenAI-compatible model endpoint that counts the
// requests it has open at once. A request is held until release says so
// (or until its connection closes), then answered after latency, the
// model's own.
type parallelModel struct {
	latency time.Duration
	// release is asked, under mu, whether the requests held may go on,
	// given those open and those arrived so far; nil holds every request
	// until its connection closes.
	release func(open, arrived int) bool

	mu      sync.Mutex
	open    int
	maxOpen int
	arrived int
	gate    chan struct{} // closed when the requests held may go on
}

func newParallelModel(t *testing.T, latency time.Duration, release func(open, arrived int) bool) (*parallelModel, string) {
	t.Helper()
	m := &parallelModel{latency: latency, release: release, gate: make(chan struct{})}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv.URL + "/v1"
}

func (m *parallelModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	m.mu.Lock()
	m.open++
	m.arrived++
	m.maxOpen = max(m.maxOpen, m.open)
	gate := m.gate
	if m.release != nil && m.release(m.open, m.arrived) {
		close(m.gate)
		m.gate = make(chan struct{})
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.open--
		m.mu.Unlock()
	}()
	select {
	case <-gate:
	case <-r.Context().Done():
		return
	}
	select {
	case <-time.After(m.latency): // the model's latency, not synchronisation
	case <-r.Context().Done():
		return
	}
	io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
}

// counts are the most requests open at once and the requests arrived.
func (m *parallelModel) counts() (maxOpen, arrived int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxOpen, m.arrived
}

// parallelHost is a host whose steps may have bound model calls in flight,
// on the model at url.
func parallelHost(t *testing.T, url string, bound int) *Host {
	t.Helper()
	return openHost(t, "", func(c *config.Config) {
		c.Tasks.MaxParallelModelCalls = bound
		c.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: url, Name: "test",
			TimeoutSeconds: 600, MaxCallSeconds: 600, MaxRetries: 0, MaxTokens: 1024}
	})
}

// The host serves at most [tasks] max_parallel_model_calls of a step's
// model calls at once, whatever the executor asks: testexec sends K at
// once, the endpoint never sees more than the bound open, every call is
// answered (the others waited, none was refused), and the bound is reached
// (the calls do overlap up to it). The endpoint holds each request until
// the bound is open, so that it is reached, and then answers after a
// latency during which calls past the bound would arrive if the host let
// them through: without the bound it sees all K open.
func TestStepModelCallsBoundedByHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		bound, k int
	}{
		{"2 of 6", 2, 6},
		{"1 of 3", 1, 3},
		{"4 of 4", 4, 4},
		// 30 waiting: the protocol's 32 calls in flight per step bound the
		// calls that may wait (one more breaks the protocol: steprpc's
		// TestDriveCallsInFlight).
		{"2 of 32", 2, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, url := newParallelModel(t, 100*time.Millisecond, func(open, arrived int) bool {
				return open >= tc.bound || arrived == tc.k
			})
			h := parallelHost(t, url, tc.bound)
			task := create(t, h, alice, map[string]any{"parallel_model_calls": tc.k}, Limits{})
			got := waitEnd(t, h, alice, task.ID)
			wantStatus(t, got, store.StatusCompleted, "")
			maxOpen, arrived := m.counts()
			t.Logf("bound %d, %d calls at once: at most %d open at the endpoint, %d arrived", tc.bound, tc.k, maxOpen, arrived)
			if maxOpen != tc.bound {
				t.Errorf("the endpoint saw at most %d requests open at once, want the bound %d", maxOpen, tc.bound)
			}
			if arrived != tc.k || got.Budgets.ModelCalls.Used != int64(tc.k) {
				t.Errorf("%d requests arrived and %d model calls charged, want %d of each", arrived, got.Budgets.ModelCalls.Used, tc.k)
			}
		})
	}
}

// A cancel while calls wait for a slot ends the step at once: the calls
// in flight are aborted, the waiting ones never start (the endpoint sees
// no request after the cancel) and are neither charged nor recorded.
func TestCancelWhileModelCallsWait(t *testing.T) {
	t.Parallel()
	const bound, k = 2, 6
	m, url := newParallelModel(t, 0, nil) // holds every request until its connection closes
	h := parallelHost(t, url, bound)
	task := create(t, h, alice, map[string]any{"parallel_model_calls": k}, Limits{})
	testwait.Until(t, 30*time.Second, "the bound's requests to arrive", func() bool {
		_, arrived := m.counts()
		return arrived >= bound
	})
	began := time.Now()
	if _, err := h.Runner.Cancel(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, h, alice, task.ID)
	took := time.Since(began)
	wantStatus(t, got, store.StatusCancelled, store.ReasonUserCancelled)
	t.Logf("cancelled with %d calls waiting: the run ended %v after the cancel", k-bound, took)
	if took > 10*time.Second {
		t.Errorf("the run ended %v after the cancel, want promptly", took)
	}
	if _, arrived := m.counts(); arrived != bound {
		t.Errorf("%d requests reached the endpoint, want only the %d in flight at the cancel", arrived, bound)
	}
	effs, err := h.Store.ListEffects(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(effs) != bound || got.Budgets.ModelCalls.Used != bound {
		t.Errorf("%d effects recorded and %d model calls charged, want %d of each (the waiting calls never started)",
			len(effs), got.Budgets.ModelCalls.Used, bound)
	}
}

// A slot is given back on release, and a context that has ended takes
// none, even a free one: a cancelled step starts no call.
func TestModelSlots(t *testing.T) {
	t.Parallel()
	s := newModelSlots(1)
	release, err := s.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	held, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.acquire(held); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with every slot taken and its context ended = %v, want context.Canceled", err)
	}
	release()
	if _, err := s.acquire(held); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire of a free slot with its context ended = %v, want context.Canceled", err)
	}
	if _, err := s.acquire(context.Background()); err != nil {
		t.Fatalf("acquire of the slot given back: %v", err)
	}
	if got := cap(newModelSlots(0)); got != DefaultMaxParallelModelCalls {
		t.Fatalf("newModelSlots(0) has %d slots, want the default %d", got, DefaultMaxParallelModelCalls)
	}
}

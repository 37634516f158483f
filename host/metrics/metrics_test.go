package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/store"
)

// openStore opens a real store file in a temporary directory.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "taskhost.db"), store.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// runTask takes a task through the store as the Runner does: created,
// started, one step that continues, then one that ends with outcome,
// leaving the task in to.
func runTask(t *testing.T, s *store.Store, id string, status store.AttemptStatus, outcome string, to store.Status, reason store.Reason) {
	t.Helper()
	ctx := t.Context()
	limits := store.Budgets{Steps: store.Budget{Limit: 10}, ToolCalls: store.Budget{Limit: 10}, ModelCalls: store.Budget{Limit: 10},
		Depth: store.Budget{Limit: 1}, WallMillis: store.Budget{Limit: 60_000}}
	if _, err := s.CreateTask(ctx, store.NewTask{ID: id, PrincipalID: "alice", Executor: "testexec", Spec: []byte(`{"goal":"g"}`), Limits: limits}); err != nil {
		t.Fatal(err)
	}
	task, err := s.StartRun(ctx, "alice", id, store.StatusPending)
	if err != nil {
		t.Fatal(err)
	}
	for i, end := range []struct {
		status  store.AttemptStatus
		outcome string
		to      store.Status
		reason  store.Reason
	}{{store.AttemptCompleted, "continue", "", ""}, {status, outcome, to, reason}} {
		a, _, err := s.ClaimAttempt(ctx, "alice", id, task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		f := store.FinishAttempt{PrincipalID: "alice", TaskID: id, RunID: task.RunID, Number: a.Number, Status: end.status,
			Outcome: end.outcome, Reason: end.reason, Summary: fmt.Sprintf("step %d", i+1), TaskTo: end.to, TaskReason: end.reason}
		if end.to == store.StatusCompleted {
			f.Result = []byte(`{}`)
		}
		if _, err := s.FinishAttempt(ctx, f); err != nil {
			t.Fatalf("finish attempt %d of %s: %v", a.Number, id, err)
		}
	}
}

// scrape GETs path and returns the status code and body.
func scrape(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), method, path, nil))
	return rec.Code, rec.Body.String()
}

// parse reads an exposition into series → value, checking that every
// sample belongs to a family declared before it with # TYPE.
func parse(t *testing.T, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	typed := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			typed[strings.Fields(rest)[0]] = true
			continue
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series := line[:i]
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		name, labels, _ := strings.Cut(series, "{")
		if labels != "" {
			// The exposition's label order is the library's: sort them, so
			// a series is found by its labels in any order.
			pairs := strings.Split(strings.TrimSuffix(labels, "}"), `",`)
			for i := range pairs {
				pairs[i] = strings.TrimSuffix(pairs[i], `"`) + `"`
			}
			slices.Sort(pairs)
			series = name + "{" + strings.Join(pairs, ",") + "}"
		}
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if !typed[name] && !typed[base] {
			t.Errorf("sample %q has no # TYPE before it", line)
		}
		if _, dup := out[series]; dup {
			t.Errorf("series %s twice", series)
		}
		out[series] = v
	}
	return out
}

// TestMetricsCountTheStore runs tasks to each end through a real store and
// scrapes the counts, then checks that a scrape after more work only adds.
func TestMetricsCountTheStore(t *testing.T) {
	s := openStore(t)
	m, err := New(Options{Source: s, Version: "1.2.3-test\"x"})
	if err != nil {
		t.Fatal(err)
	}
	m.SetServing(true)

	runTask(t, s, "t_done", store.AttemptCompleted, "complete", store.StatusCompleted, "")
	runTask(t, s, "t_failed", store.AttemptFailed, "fail", store.StatusFailed, store.ReasonExecutorFailed)
	runTask(t, s, "t_crashed", store.AttemptInterrupted, "", store.StatusInterrupted, store.ReasonExecutorCrashed)
	limits := store.Budgets{Steps: store.Budget{Limit: 1}, ToolCalls: store.Budget{Limit: 1}, ModelCalls: store.Budget{Limit: 1}, Depth: store.Budget{Limit: 1}, WallMillis: store.Budget{Limit: 1000}}
	if _, err := s.CreateTask(t.Context(), store.NewTask{ID: "t_pending", PrincipalID: "bob", Executor: "testexec", Spec: []byte(`{}`), Limits: limits}); err != nil {
		t.Fatal(err)
	}

	code, body := scrape(t, m.Handler(), http.MethodGet, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	got := parse(t, body)
	want := map[string]float64{
		`taskhost_build_info{goversion="` + runtime.Version() + `",version="1.2.3-test\"x"}`: 1,
		`taskhost_serving`:                   1,
		`taskhost_store_up`:                  1,
		`taskhost_store_read_errors_total`:   0,
		`taskhost_tasks{status="completed"}`: 1, `taskhost_tasks{status="failed"}`: 1,
		`taskhost_tasks{status="interrupted"}`: 1, `taskhost_tasks{status="pending"}`: 1,
		`taskhost_tasks{status="running"}`: 0, `taskhost_tasks{status="waiting_approval"}`: 0, `taskhost_tasks{status="cancelled"}`: 0,
		`taskhost_running_plugins`:                                    0,
		`taskhost_steps_running`:                                      0,
		`taskhost_steps_total{outcome="continue",status="completed"}`: 3,
		`taskhost_steps_total{outcome="complete",status="completed"}`: 1,
		`taskhost_steps_total{outcome="fail",status="failed"}`:        1,
		`taskhost_steps_total{outcome="none",status="interrupted"}`:   1,
		`taskhost_steps_total{outcome="none",status="cancelled"}`:     0,
		`taskhost_approvals_pending`:                                  0,
		`taskhost_runs_lost_total`:                                    0,
	}
	for series, v := range want {
		if g, ok := got[series]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", series, g, ok, v)
		}
	}
	// 4 finished statuses × 4 outcomes, 7 task statuses, 3 effect kinds ×
	// 5 statuses, 7 budgets, 8 single series, 4 of the connection pool,
	// 5 of the fleet counted as they happen (fenced writes, sweeps,
	// self-fencings, LISTEN reconnects, this host's heartbeat age): the
	// size of the store's part does not grow with the number of tasks.
	// (The latency histograms have a series a bucket, whatever happens.)
	n := 0
	for series := range got {
		if strings.HasPrefix(series, "taskhost_") && !strings.HasPrefix(series, "taskhost_store_commit_") && !strings.HasPrefix(series, "taskhost_model_call_") {
			n++
		}
	}
	if n != 16+7+15+7+8+4+5 {
		t.Errorf("%d taskhost_ series, want %d:\n%s", n, 16+7+15+7+8+4+5, body)
	}

	// A task resumed and running: one plugin, one step running.
	task, err := s.StartRun(t.Context(), "alice", "t_crashed", store.StatusInterrupted)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ClaimAttempt(t.Context(), "alice", "t_crashed", task.RunID); err != nil {
		t.Fatal(err)
	}
	_, body = scrape(t, m.Handler(), http.MethodGet, "/metrics")
	after := parse(t, body)
	for series, v := range map[string]float64{`taskhost_running_plugins`: 1, `taskhost_steps_running`: 1, `taskhost_tasks{status="running"}`: 1, `taskhost_tasks{status="interrupted"}`: 0} {
		if after[series] != v {
			t.Errorf("after the resume %s = %v, want %v", series, after[series], v)
		}
	}
	for series, v := range got {
		if strings.HasSuffix(strings.SplitN(series, "{", 2)[0], "_total") && after[series] < v {
			t.Errorf("counter %s went down: %v → %v", series, v, after[series])
		}
	}
}

// TestHealthz is 200 while the daemon serves and the store reads, and 503
// with the reason when it does not serve or the store is closed; /metrics
// then says so instead of reporting zeros.
func TestHealthz(t *testing.T) {
	s := openStore(t)
	m, err := New(Options{Source: s})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name     string
		do       func()
		code     int
		contains string
	}{
		{"starting", func() {}, http.StatusServiceUnavailable, "not serving its API"},
		{"serving", func() { m.SetServing(true) }, http.StatusOK, "ok"},
		{"store closed", func() {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}, http.StatusServiceUnavailable, "the store does not answer a read"},
		{"stopping", func() { m.SetServing(false) }, http.StatusServiceUnavailable, "not serving its API"},
	}
	for _, st := range steps {
		st.do()
		code, body := scrape(t, m.Handler(), http.MethodGet, "/healthz")
		if code != st.code || !strings.Contains(body, st.contains) {
			t.Errorf("%s: /healthz %d %q, want %d with %q", st.name, code, body, st.code, st.contains)
		}
	}
	code, body := scrape(t, m.Handler(), http.MethodGet, "/metrics")
	got := parse(t, body)
	if code != http.StatusOK || got["taskhost_store_up"] != 0 || got["taskhost_store_read_errors_total"] < 2 {
		t.Errorf("/metrics with the store closed: %d\n%s", code, body)
	}
	if _, ok := got[`taskhost_tasks{status="running"}`]; ok {
		t.Errorf("/metrics reports task counts without a store read:\n%s", body)
	}
}

// TestMethodsAndPaths refuses writes and unknown paths.
func TestMethodsAndPaths(t *testing.T) {
	m, err := New(Options{Source: openStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	m.SetServing(true)
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/metrics", 200}, {http.MethodHead, "/metrics", 200}, {http.MethodGet, "/healthz", 200},
		{http.MethodPost, "/metrics", 405}, {http.MethodDelete, "/healthz", 405}, {http.MethodGet, "/", 404}, {http.MethodGet, "/debug/pprof/", 404},
	} {
		if code, body := scrape(t, m.Handler(), c.method, c.path); code != c.code {
			t.Errorf("%s %s: %d %q, want %d", c.method, c.path, code, body, c.code)
		}
	}
}

// blockingSource holds every read until released, to fill the in-flight
// slots.
type blockingSource struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingSource) Stats(ctx context.Context) (store.Stats, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
		return store.Stats{}, nil
	case <-ctx.Done():
		return store.Stats{}, ctx.Err()
	}
}
func (b *blockingSource) Ping(ctx context.Context) error { _, err := b.Stats(ctx); return err }

// TestInFlightBound answers maxInFlight requests at once and refuses the
// next with 503 before it reads the store.
func TestInFlightBound(t *testing.T) {
	src := &blockingSource{entered: make(chan struct{}, maxInFlight+1), release: make(chan struct{})}
	m, err := New(Options{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	m.SetServing(true)
	var wg sync.WaitGroup
	codes := make(chan int, maxInFlight)
	for range maxInFlight {
		wg.Go(func() {
			code, _ := scrape(t, m.Handler(), http.MethodGet, "/metrics")
			codes <- code
		})
	}
	for range maxInFlight {
		<-src.entered
	}
	code, body := scrape(t, m.Handler(), http.MethodGet, "/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "busy: 8 requests in flight") {
		t.Errorf("request %d: %d %q, want 503 busy", maxInFlight+1, code, body)
	}
	if len(src.entered) != 0 {
		t.Error("the refused request read the store")
	}
	close(src.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("an admitted request got %d", c)
		}
	}
}

// TestListen binds loopback addresses only and serves over real HTTP.
func TestListen(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", "localhost:0", "10.1.2.3:9464"} {
		if ln, err := Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) succeeded, want a refusal", addr)
		}
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{Source: openStore(t), Version: "v"})
	if err != nil {
		t.Fatal(err)
	}
	m.SetServing(true)
	m.Serve(ln)
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4; charset=utf-8") || !strings.Contains(string(body), `taskhost_build_info{goversion=`) || !strings.Contains(string(body), `version="v"} 1`) {
		t.Errorf("GET /metrics over HTTP: %d %q\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("after Close the listener still answers (err %v)", err)
	}
}

// The host's events reach the exposition through the Instruments it was
// given: starts and crashes by executor (and reason), step durations as a
// histogram by executor and status, commit latencies; a store that ended a
// task on a budget shows under that budget.
func TestInstrumentsAndBudgets(t *testing.T) {
	s := openStore(t)
	inst := NewInstruments()
	m, err := New(Options{Source: s, Version: "v", Instruments: inst})
	if err != nil {
		t.Fatal(err)
	}
	runTask(t, s, "t_spent", store.AttemptFailed, "fail", store.StatusFailed, store.ReasonToolBudgetExhausted)
	inst.PluginStarted("legacy")
	inst.PluginStarted("legacy")
	inst.PluginCrashed("legacy", "executor_crashed")
	inst.StepFinished("legacy", "completed", 300*time.Millisecond)
	inst.StepFinished("legacy", "completed", 2*time.Second)
	inst.StepFinished("legacy", "interrupted", time.Millisecond)
	inst.StoreCommitted(2 * time.Millisecond)

	_, body := scrape(t, m.Handler(), http.MethodGet, "/metrics")
	got := parse(t, body)
	for series, want := range map[string]float64{
		`taskhost_plugin_starts_total{executor="legacy"}`:                                      2,
		`taskhost_plugin_crashes_total{executor="legacy",reason="executor_crashed"}`:           1,
		`taskhost_step_duration_seconds_count{executor="legacy",status="completed"}`:           2,
		`taskhost_step_duration_seconds_sum{executor="legacy",status="completed"}`:             2.3,
		`taskhost_step_duration_seconds_bucket{executor="legacy",le="0.5",status="completed"}`: 1,
		`taskhost_step_duration_seconds_count{executor="legacy",status="interrupted"}`:         1,
		`taskhost_store_commit_seconds_bucket{le="0.0025"}`:                                    1,
		`taskhost_budget_exhausted_tasks{budget="tool_calls"}`:                                 1,
		`taskhost_budget_exhausted_tasks{budget="steps"}`:                                      0,
	} {
		if g, ok := got[series]; !ok || g != want {
			t.Errorf("%s = %v (present %v), want %v", series, g, ok, want)
		}
	}
	// The commits of runTask itself went through another store: this
	// Server's histogram saw only the one reported to its Instruments.
	if got["taskhost_store_commit_seconds_count"] != 1 {
		t.Errorf("commit count %v, want 1", got["taskhost_store_commit_seconds_count"])
	}
}

// TestFleetAndStoreInstruments: the fleet and store series a host reports
// — retries by SQLSTATE, fenced writes, sweeps, self-fencings, LISTEN
// reconnects, its own heartbeat age and the fleet's as last read — and the
// connection pool's, read from the store handle at scrape time.
func TestFleetAndStoreInstruments(t *testing.T) {
	s := openStore(t)
	inst := NewInstruments()
	m, err := New(Options{Source: s, Version: "v", Instruments: inst})
	if err != nil {
		t.Fatal(err)
	}
	got := parse(t, func() string { _, b := scrape(t, m.Handler(), http.MethodGet, "/metrics"); return b }())
	if got["taskhost_host_heartbeat_age_seconds"] != -1 {
		t.Errorf("heartbeat age before the first = %v, want -1", got["taskhost_host_heartbeat_age_seconds"])
	}
	inst.StoreRetried("40P01")
	inst.StoreRetried("40P01")
	inst.StoreRetried("57P01")
	inst.StoreFenced()
	inst.RunsSwept(3)
	inst.SelfFenced()
	inst.ListenReconnected()
	inst.ModelCalled(1091, 45, 1500*time.Millisecond)
	inst.ModelCalled(900, 5, 500*time.Millisecond)
	inst.HeartbeatSent(time.Now().Add(-2 * time.Second))
	inst.FleetHeartbeats(map[string]time.Duration{"h-gone": time.Hour})
	inst.FleetHeartbeats(map[string]time.Duration{"h-a": 500 * time.Millisecond, "h-b": 4 * time.Second})

	_, body := scrape(t, m.Handler(), http.MethodGet, "/metrics")
	got = parse(t, body)
	for series, want := range map[string]float64{
		`taskhost_store_retries_total{sqlstate="40P01"}`:        2,
		`taskhost_store_retries_total{sqlstate="57P01"}`:        1,
		`taskhost_store_fenced_writes_total`:                    1,
		`taskhost_fleet_sweeps_total`:                           3,
		`taskhost_fleet_self_fenced_total`:                      1,
		`taskhost_fleet_listen_reconnects_total`:                1,
		`taskhost_model_tokens_total{kind="prompt"}`:            1991,
		`taskhost_model_tokens_total{kind="completion"}`:        50,
		`taskhost_model_call_seconds_count`:                     2,
		`taskhost_model_call_seconds_sum`:                       2,
		`taskhost_fleet_host_heartbeat_age_seconds{host="h-a"}`: 0.5,
		`taskhost_fleet_host_heartbeat_age_seconds{host="h-b"}`: 4,
		`taskhost_store_pool_in_use`:                            0,
		`taskhost_store_pool_waits_total`:                       0,
		`taskhost_store_pool_wait_seconds_total`:                0,
	} {
		if g, ok := got[series]; !ok || g != want {
			t.Errorf("%s = %v (present %v), want %v", series, g, ok, want)
		}
	}
	if _, ok := got[`taskhost_fleet_host_heartbeat_age_seconds{host="h-gone"}`]; ok {
		t.Error("a host no longer in the table keeps its series")
	}
	if age := got["taskhost_host_heartbeat_age_seconds"]; age < 2 || age > 60 {
		t.Errorf("heartbeat age = %v, want about 2 s", age)
	}
	if got["taskhost_store_pool_open"] < 1 {
		t.Errorf("pool open = %v, want the writer's connection", got["taskhost_store_pool_open"])
	}
}

package host

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// heldModel is an OpenAI-compatible endpoint that holds every request until
// released, then answers each after delay: a slow model. It records, per
// task (the request's goal), when each answer was sent and each request
// arrived.
type heldModel struct {
	delay   time.Duration
	release chan struct{}

	mu       sync.Mutex
	pending  int
	answered map[string]time.Time // goal → when its last answer was sent
	gaps     []time.Duration      // answer sent → the same task's next request
}

func (m *heldModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	arrived := time.Now()
	goal := goalOf(body)
	m.mu.Lock()
	if last, ok := m.answered[goal]; ok {
		m.gaps = append(m.gaps, arrived.Sub(last))
	}
	m.pending++
	m.mu.Unlock()
	select {
	case <-m.release:
	case <-r.Context().Done():
		return
	}
	time.Sleep(m.delay) // the model's own latency, not synchronisation
	m.mu.Lock()
	m.pending--
	m.answered[goal] = time.Now()
	m.mu.Unlock()
	io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
}

// goalOf finds the task's goal in a request: the test executor sends it as
// the system message, and every goal here is "inflight-N".
func goalOf(body []byte) string {
	i := bytes.Index(body, []byte("inflight-"))
	if i < 0 {
		return ""
	}
	j := i + len("inflight-")
	for j < len(body) && body[j] >= '0' && body[j] <= '9' {
		j++
	}
	return string(body[i:j])
}

func (m *heldModel) held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pending
}

// BenchmarkInFlight holds TASKHOST_INFLIGHT (default 1000) tasks in flight
// on one host — each a plugin process of its own whose step waits on a
// slow model — and reports what they cost: the daemon's and the plugins'
// proportional memory (PSS) and open files, per task and in all; then it
// lets the model answer (each answer 200 ms after release) and reports the
// host's step turnaround at that load — from a model answer to the same
// task's next model request: the plugin's return, the durable step, the
// next step's dispatch — at the median and the 99th percentile. One op is
// one whole run.
func BenchmarkInFlight(b *testing.B) {
	n := 1000
	if v := os.Getenv("TASKHOST_INFLIGHT"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > config.MaxConcurrentCap {
			b.Fatalf("TASKHOST_INFLIGHT=%q: want 1..%d", v, config.MaxConcurrentCap)
		}
	}
	for range b.N {
		m := &heldModel{delay: 200 * time.Millisecond, release: make(chan struct{}), answered: map[string]time.Time{}}
		srv := httptest.NewServer(m)
		cfg := testConfig(b)
		cfg.Tasks.MaxConcurrent = n
		cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 600, MaxRetries: 0}
		h, err := Open(context.Background(), Options{DataDir: testwait.ShortTempDir(b), Config: cfg, ExecutorDir: executorDir(b)})
		if err != nil {
			b.Fatal(err)
		}
		fds0 := countFDs(b, os.Getpid())
		pss0 := pssKiB(b, os.Getpid())
		ctx := context.Background()
		start := time.Now()
		ids := make([]string, n)
		for i := range n {
			t, err := h.Runner.Create(ctx, fmt.Sprint("p", i%8), CreateRequest{Executor: "testexec",
				Spec: fmt.Appendf(nil, `{"goal":"inflight-%d","testexec":{"steps":3,"call_model":true}}`, i)})
			if err != nil {
				b.Fatalf("create %d: %v", i, err)
			}
			ids[i] = t.ID
		}
		testwait.Until(b, 10*time.Minute, fmt.Sprintf("%d steps waiting on the model", n), func() bool { return m.held() >= n })
		b.ReportMetric(time.Since(start).Seconds(), "s-to-all-in-flight")
		plugins := childPIDs(b, os.Getpid())
		daemonPSS := pssKiB(b, os.Getpid()) - pss0
		var pluginPSS, pluginFDs int
		for _, pid := range plugins {
			pluginPSS += pssKiB(b, pid)
			pluginFDs += countFDs(b, pid)
		}
		daemonFDs := countFDs(b, os.Getpid()) - fds0
		b.ReportMetric(float64(len(plugins)), "plugins")
		b.ReportMetric(float64(daemonPSS)/1024, "daemon-MiB")
		b.ReportMetric(float64(daemonPSS)/float64(n), "daemon-KiB/task")
		b.ReportMetric(float64(pluginPSS)/float64(max(len(plugins), 1))/1024, "plugin-MiB/task")
		b.ReportMetric(float64(daemonFDs)/float64(n), "daemon-fds/task")
		b.ReportMetric(float64(pluginFDs)/float64(max(len(plugins), 1)), "plugin-fds/task")
		b.Logf("%d in flight after %s: %d plugins; daemon +%d KiB PSS, +%d fds; plugins %d KiB PSS, %d fds in all",
			n, time.Since(start).Round(time.Second), len(plugins), daemonPSS, daemonFDs, pluginPSS, pluginFDs)

		close(m.release)
		released := time.Now()
		for _, id := range ids {
			if err := h.Runner.Wait(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(time.Since(released).Seconds(), "s-release-to-done")
		if os.Getenv("TASKHOST_INFLIGHT_DEBUG") != "" {
			as, _ := h.Runner.Attempts(ctx, "p0", ids[0])
			for _, a := range as {
				b.Logf("attempt %d: %s → %s (%s)", a.Number, a.StartedAt.Sub(released), a.EndedAt.Sub(released), a.Status)
			}
		}
		// A task that did not complete is counted and shown, not fatal:
		// what a host at this load does is the measurement.
		ends := map[string]int{}
		for i, id := range ids {
			t, err := h.Runner.Get(ctx, fmt.Sprint("p", i%8), id)
			if err != nil {
				b.Fatal(err)
			}
			ends[string(t.Status)+"/"+string(t.Reason)]++
			if t.Status != store.StatusCompleted && ends[string(t.Status)+"/"+string(t.Reason)] == 1 {
				b.Logf("task %s: %s (%s: %s)", id, t.Status, t.Reason, t.Message)
			}
		}
		b.Logf("ends: %v", ends)
		b.ReportMetric(float64(ends[string(store.StatusCompleted)+"/"]), "completed")
		m.mu.Lock()
		gaps := slices.Clone(m.gaps)
		m.mu.Unlock()
		slices.Sort(gaps)
		if len(gaps) > 0 {
			b.Logf("turnaround over %d steps: p50 %s, p99 %s", len(gaps), gaps[len(gaps)/2], gaps[len(gaps)*99/100])
			b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds())/1000, "turnaround-p50-ms")
			b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds())/1000, "turnaround-p99-ms")
		}
		h.Close(ctx)
		srv.Close()
	}
}

// pssKiB is a process's proportional set size, from smaps_rollup.
func pssKiB(tb testing.TB, pid int) int {
	tb.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0 // it exited
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return kib
		}
	}
	return 0
}

func countFDs(tb testing.TB, pid int) int {
	tb.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return 0
	}
	return len(ents)
}

// childPIDs are the processes whose parent is pid: the plugins (and, when
// confined through a trampoline, what it exec'd in its place). Each thread
// lists the children it forked.
func childPIDs(tb testing.TB, pid int) []int {
	tb.Helper()
	threads, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []int
	for _, th := range threads {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", th.Name(), "children"))
		if err != nil {
			continue // the thread ended
		}
		for _, f := range strings.Fields(string(data)) {
			if p, err := strconv.Atoi(f); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

package plugin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/testwait"
)

// warnLog is a WARN-level logger and what it wrote; the logger holds mu
// while it writes.
type warnLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *warnLog) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: &w.buf, Mutex: &w.mu, Level: hclog.Warn})
}

func (w *warnLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// pluginCgroupsOf lists the cgroups of this daemon's the process pid is in.
func pluginCgroupsOf(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, "/taskhost-"+strconv.Itoa(os.Getpid())+"/plugin-") {
			in = append(in, line)
		}
	}
	return in
}

// Where the daemon can make no cgroup with limits, it says so once at
// WARN, with why, and its plugins still start, with their rlimits and no
// cgroup; where it can, a plugin runs in cgroups of its own, which its
// Stop removes, and the registry says which.
func TestPluginCgroupsOrOneWarning(t *testing.T) {
	var log warnLog
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(t), "p"), Logger: log.logger(),
		Cgroups: &cgroups.Set{Mode: cgroups.ModeNone, Why: "no cgroup for this test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	spec := PluginSpec{Kind: "testexec", Path: testexecBin(t), Confine: DefaultConfinement()}
	for range 2 {
		ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
		if err != nil {
			t.Fatal(err)
		}
		if in := pluginCgroupsOf(t, ec.proc.pid); len(in) > 0 {
			t.Errorf("a plugin without cgroups is in %v", in)
		}
		ec.Stop()
	}
	if n := strings.Count(log.String(), "plugins have no cgroup limits"); n != 1 || !strings.Contains(log.String(), "no cgroup for this test") {
		t.Errorf("want one WARN line with why, got %d:\n%s", n, log.String())
	}
	if s := reg.Confinement("testexec"); strings.Contains(s, "cgroup") {
		t.Errorf("Confinement %q names cgroups it has not", s)
	}

	set := cgroups.Find(true)
	if !set.Limited() {
		t.Skipf("no cgroup limits here: %s", set.Why)
	}
	var log2 warnLog
	reg2, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(t), "p"), Logger: log2.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer reg2.Close()
	if strings.Contains(log2.String(), "no cgroup limits") {
		t.Errorf("a registry with cgroups warned: %s", log2.String())
	}
	spec.Confine.Cgroup = cgroups.Limits{MemoryBytes: 256 << 20, Pids: 100, CPUPercent: 50}
	if err := reg2.Register(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if s := reg2.Confinement("testexec"); !strings.Contains(s, set.Mode+" (memory 256 MiB, 100 processes, 50% CPU)") {
		t.Errorf("Confinement %q does not name the plugin's cgroup limits", s)
	}
	ec, err := launch(context.Background(), reg2.forker, spec, reg2.opts, reg2.support, NewServicesServer(NoServices{}))
	if err != nil {
		t.Fatal(err)
	}
	in := pluginCgroupsOf(t, ec.proc.pid)
	if len(in) == 0 {
		t.Fatal("the plugin runs in no plugin cgroup of its own")
	}
	box := ec.proc.box
	ec.Stop()
	for _, d := range append(box.Join(), cgroup2Dir(box)...) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s outlived the plugin's Stop: %v", d, err)
		}
	}
}

func cgroup2Dir(b *cgroups.Box) []string {
	if b.V2 == nil {
		return nil
	}
	return []string{b.V2.Dir()}
}

// A plugin ended at its limit carries a typed cause naming the limit and
// the setting.
func TestLimitErrorIsTyped(t *testing.T) {
	l := cgroups.Limits{MemoryBytes: 128 << 20, Pids: 64, CPUPercent: 100}
	for _, tc := range []struct{ limit, bound string }{
		{cgroups.LimitMemory, "memory_mb = 128"},
		{cgroups.LimitProcesses, "max_processes = 64"},
	} {
		var err error = limitError(tc.limit, l)
		if !errors.Is(err, ErrResourceLimit) {
			t.Errorf("%v does not match ErrResourceLimit", err)
		}
		if le, ok := errors.AsType[*LimitError](err); !ok || le.Limit != tc.limit || !strings.Contains(err.Error(), tc.limit+" limit ("+tc.bound+")") {
			t.Errorf("%q: want the %s limit and %q", err, tc.limit, tc.bound)
		}
	}
}

// BenchmarkLaunchCgroups measures what a plugin's cgroups add to its start
// (Launch and Describe of the test executor through taskhost-confine, then
// its Stop, which removes them): without cgroups and with this machine's,
// in the same run; it reports both medians and their ratio.
func BenchmarkLaunchCgroups(b *testing.B) {
	dir, err := trampolines()
	trampolinesBuilt.Store(true)
	if err != nil {
		b.Fatalf("build the trampolines: %v", err)
	}
	found := cgroups.Find(true)
	if found.V1 == nil && found.V2 == nil {
		b.Skipf("no cgroups here: %s", found.Why)
	}
	spec := PluginSpec{Kind: "testexec", Path: testexecBin(b), Confine: DefaultConfinement()}
	n := max(b.N, 20)
	median := func(set *cgroups.Set) (start, stop time.Duration) {
		reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(b), "p"),
			Trampoline: filepath.Join(dir, "taskhost-confine"), Cgroups: set})
		if err != nil {
			b.Fatal(err)
		}
		defer reg.Close()
		starts, stops := make([]time.Duration, n), make([]time.Duration, n)
		for i := range n {
			t0 := time.Now()
			ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ec.Describe(context.Background()); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			ec.Stop()
			starts[i], stops[i] = t1.Sub(t0), time.Since(t1)
		}
		slices.Sort(starts)
		slices.Sort(stops)
		return starts[n/2], stops[n/2]
	}
	b.ResetTimer()
	bareStart, bareStop := median(&cgroups.Set{Mode: cgroups.ModeNone, Why: "benchmark baseline"})
	cgStart, cgStop := median(&found)
	b.ReportMetric(float64(bareStart.Microseconds()), "bare-start-µs")
	b.ReportMetric(float64(cgStart.Microseconds()), found.Mode+"-start-µs")
	b.ReportMetric(float64(cgStart)/float64(bareStart), "start-ratio")
	b.ReportMetric(float64(bareStop.Microseconds()), "bare-stop-µs")
	b.ReportMetric(float64(cgStop.Microseconds()), found.Mode+"-stop-µs")
}

// A plugin's GOMAXPROCS is its CPU bound in whole CPUs, rounded up, and
// never 0.
func TestGOMAXPROCSIsTheCPUBoundRoundedUp(t *testing.T) {
	for _, c := range []struct{ percent, want int }{
		{1, 1}, {50, 1}, {100, 1}, {101, 2}, {250, 3}, {6400, 64},
	} {
		if got := gomaxprocs(c.percent); got != c.want {
			t.Errorf("gomaxprocs(%d) = %d, want %d", c.percent, got, c.want)
		}
	}
}

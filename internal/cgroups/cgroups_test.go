package cgroups

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// The cgroup files a command's limits are read from, as the kernel writes
// them: a counter of the key asked for, 0 for a key or a file missing.
func TestCounterReadsFlatKeyedFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"memory.events":      "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n",
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
		"pids.events":        "max 7\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		file, key string
		want      int64
	}{
		{"memory.events", "oom_kill", 1},
		{"memory.events", "max", 12},
		{"memory.events", "oom", 1}, // not oom_kill's or oom_group_kill's
		{"memory.oom_control", "oom_kill", 3},
		{"pids.events", "max", 7},
		{"pids.events", "absent", 0},
		{"no.such.file", "max", 0},
	} {
		if got := counter(filepath.Join(dir, tc.file), tc.key); got != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.file, tc.key, got, tc.want)
		}
	}
	if got := hit2(dir); got != LimitMemory {
		t.Errorf("hit2 = %q, want %q (an OOM kill first)", got, LimitMemory)
	}
}

// What a cgroup2 command cgroup is given: the values the kernel parses.
func TestSetLimits2Values(t *testing.T) {
	dir := t.TempDir()
	if err := setLimits2(dir, Limits{MemoryBytes: 128 << 20, Pids: 64, CPUPercent: 150}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"memory.max": "134217728", "memory.oom.group": "1", "pids.max": "64", "cpu.max": "150000 100000", "memory.swap.max": "0",
	} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
}

// Without the controllers in the daemon's cgroup, cgroup2 gives no limits
// and says why; nothing is made.
func TestEnableControllers2RefusesWhatIsNotDelegated(t *testing.T) {
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "cgroup.controllers"), []byte("cpuset io\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := enableControllers2(base, filepath.Join(base, "taskhost-1"))
	if err == nil {
		t.Fatal("no memory, pids or cpu controller: enabled anyway")
	}
	if _, serr := os.Stat(filepath.Join(base, "taskhost-1")); !os.IsNotExist(serr) {
		t.Errorf("the tree was made: %v", serr)
	}
	t.Log(err)
}

func TestReleaseAtLeast(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		release string
		want    bool
	}{
		{"6.18.44-fc-v1045", true},
		{"5.7.0", true},
		{"5.6.19-generic", false},
		{"5.10", true},
		{"4.19.0", false},
		{"5.7-rc1", true},
		{"", false},
		{"six.one", false},
	} {
		if got := releaseAtLeast(tt.release, 5, 7); got != tt.want {
			t.Errorf("releaseAtLeast(%q, 5, 7) = %v, want %v", tt.release, got, tt.want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/sys/fs/cgroup":       "/sys/fs/cgroup",
		`/mnt/with\040space`:   "/mnt/with space",
		`/trailing\04`:         `/trailing\04`,
		`/tab\011and\134slash`: "/tab\tand\\slash",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// A watch kills the tree at the first limit its counters name and keeps
// naming it after the counters went back (v1's under_oom does once the
// waiting process is killed); a watch ended before any limit names none.
func TestWatchKillsAtTheFirstLimit(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	killed := make(chan struct{})
	w := NewWatch(time.Millisecond, func() string {
		if hits.Add(1) == 3 {
			return LimitMemory
		}
		return ""
	}, func() { close(killed) })
	<-killed
	if got := w.End(); got != LimitMemory {
		t.Errorf("End = %q, want %q", got, LimitMemory)
	}
	quiet := NewWatch(time.Hour, func() string { return "" }, func() { t.Error("killed without a limit") })
	if got := quiet.End(); got != "" {
		t.Errorf("End = %q, want none", got)
	}
}

// BenchmarkHit1 measures one poll of a cgroup v1 watch (Cgroups1.Hit) on
// files as the kernel lays them out, no limit reached: what every running
// plugin costs the daemon every pluginLimitPoll.
func BenchmarkHit1(b *testing.B) {
	dir := b.TempDir()
	mem, pids := filepath.Join(dir, "memory"), filepath.Join(dir, "pids")
	for d, files := range map[string]map[string]string{
		mem:  {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", "memory.failcnt": "0\n"},
		pids: {"pids.events": "max 0\n"},
	} {
		if err := os.Mkdir(d, 0o700); err != nil {
			b.Fatal(err)
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
	c := &Cgroups1{dirs: map[string]string{"memory": mem, "pids": pids}}
	for b.Loop() {
		if h := c.Hit(); h != "" {
			b.Fatalf("Hit = %q", h)
		}
	}
}

// A cgroup v1 watch's verdict from the files as the kernel writes them:
// memory at an OOM kill or a process waiting at the limit, and on a kernel
// without an oom_kill counter at any failure to charge; processes at a
// refused fork; nothing otherwise.
func TestHit1(t *testing.T) {
	for _, tc := range []struct {
		name              string
		oom, fail, pidEvs string
		want              string
	}{
		{"quiet", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", "5\n", "max 0\n", ""},
		{"oom kill", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "0\n", "max 0\n", LimitMemory},
		{"waiting at the limit", "oom_kill_disable 1\nunder_oom 1\noom_kill 0\n", "0\n", "max 0\n", LimitMemory},
		{"old kernel, limit hit", "oom_kill_disable 0\nunder_oom 0\n", "3\n", "max 0\n", LimitMemory},
		{"old kernel, quiet", "oom_kill_disable 0\nunder_oom 0\n", "0\n", "max 0\n", ""},
		{"fork refused", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", "0\n", "max 2\n", LimitProcesses},
		{"memory first", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "0\n", "max 2\n", LimitMemory},
		{"no files", "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mem, pids := filepath.Join(dir, "memory"), filepath.Join(dir, "pids")
			for d, files := range map[string]map[string]string{
				mem:  {"memory.oom_control": tc.oom, "memory.failcnt": tc.fail},
				pids: {"pids.events": tc.pidEvs},
			} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
				for name, body := range files {
					if body == "" {
						continue
					}
					if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			c := &Cgroups1{dirs: map[string]string{"memory": mem, "pids": pids}}
			if got := c.Hit(); got != tc.want {
				t.Errorf("Hit = %q, want %q", got, tc.want)
			}
		})
	}
}

// Every watch of a period polls at the same instants: the next multiple
// of the period, a whole period on from one.
func TestUntilNextFallsOnMultiples(t *testing.T) {
	const period = 50 * time.Millisecond
	base := time.Now().Truncate(period)
	for _, tc := range []struct {
		offset, want time.Duration
	}{
		{0, period},
		{time.Nanosecond, period - time.Nanosecond},
		{20 * time.Millisecond, 30 * time.Millisecond},
		{period - time.Nanosecond, time.Nanosecond},
	} {
		now := base.Add(tc.offset)
		got := untilNext(now, period)
		if got != tc.want {
			t.Errorf("untilNext(base+%v) = %v, want %v", tc.offset, got, tc.want)
		}
		if next := now.Add(got); !next.Equal(next.Truncate(period)) {
			t.Errorf("base+%v: the next poll %v is not a multiple of %v", tc.offset, next, period)
		}
	}
}

package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/internal/uids"
)

// poolRegistry is a registry whose kind "testexec" (the binary at bin, a
// copy of the test executor the test may rewrite) keeps prestart processes
// ready.
func poolRegistry(t *testing.T, bin, pin string, prestart int, opts PluginOptions) (*Registry, PluginSpec) {
	t.Helper()
	opts.SocketDir = filepath.Join(testwait.ShortTempDir(t), "p")
	reg, err := NewRegistry(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	spec := PluginSpec{Kind: "testexec", Path: bin, SHA256: pin, Confine: DefaultConfinement(), Prestart: prestart}
	spec.Confine.OwnUID = opts.UIDs != nil
	if err := reg.Register(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	return reg, spec
}

// copyTestexec copies the test executor into a dir of its own, open to a
// pool uid, so the test can replace it.
func copyTestexec(t *testing.T) string {
	t.Helper()
	dir := testwait.ShortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "taskhost-executor-testexec")
	copyFile(t, testexecBin(t), bin, nil)
	return bin
}

// copyFile writes src to dst (a new file renamed over it), with extra
// appended: a build whose bytes, and so SHA-256, differ, that still runs.
func copyFile(t *testing.T, src, dst string, extra []byte) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	tmp := dst + ".new"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write(extra); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// ready waits until kind's pool holds n processes and returns their pids.
func ready(t *testing.T, reg *Registry, n int) []int {
	t.Helper()
	var s PoolStatus
	testwait.Until(t, 30*time.Second, fmt.Sprintf("%d pooled processes", n), func() bool {
		s = reg.PoolStatus("testexec")
		return s.Idle == n
	})
	return s.PIDs
}

func pidOf(t *testing.T, e Executor) int {
	t.Helper()
	ec, ok := e.(*executorClient)
	if !ok {
		t.Fatalf("executor is a %T", e)
	}
	return ec.proc.pid
}

func gone(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		testwait.Until(t, 15*time.Second, fmt.Sprintf("pooled process %d to be gone", pid), func() bool {
			return !processAlive(pid)
		})
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// A launch is served by a process started before it (no start on its
// path), which serves that launch only: the pool starts another in its
// place and never hands the taken one out again, even once it stopped.
func TestPoolServesAPreStartedProcess(t *testing.T) {
	reg, _ := poolRegistry(t, testexecBin(t), "", 1, PluginOptions{})
	before := ready(t, reg, 1)
	e, err := reg.Launch(context.Background(), "testexec", NoServices{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pidOf(t, e); got != before[0] {
		t.Fatalf("launch started process %d, want the pooled %d", got, before[0])
	}
	if _, err := e.Describe(context.Background()); err != nil {
		t.Fatalf("the taken process does not answer: %v", err)
	}
	s := reg.PoolStatus("testexec")
	if s.Served != 1 || s.Cold != 0 {
		t.Fatalf("pool status %+v, want 1 served, 0 cold", s)
	}
	next := ready(t, reg, 1)
	if next[0] == before[0] {
		t.Fatalf("the taken process %d is back in the pool", next[0])
	}
	e.Stop()
	gone(t, before[0])
	e2, err := reg.Launch(context.Background(), "testexec", NoServices{})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Stop()
	if got := pidOf(t, e2); got != next[0] {
		t.Fatalf("second launch got process %d, want the pooled %d", got, next[0])
	}
}

// A pooled process is never handed out once its binary is replaced: an
// unpinned kind starts a process of the new binary, a pinned one refuses
// the pin mismatch at the launch as before; the stale process is killed.
func TestPoolNeverServesAReplacedBinary(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprintf("pinned=%t", pinned), func(t *testing.T) {
			bin := copyTestexec(t)
			pin := ""
			if pinned {
				pin = fileSHA256(t, bin)
			}
			reg, _ := poolRegistry(t, bin, pin, 2, PluginOptions{})
			stale := ready(t, reg, 2)
			copyFile(t, testexecBin(t), bin, []byte("another build"))
			e, err := reg.Launch(context.Background(), "testexec", NoServices{})
			var ue *UnavailableError
			switch {
			case pinned && (!errors.As(err, &ue) || ue.Check != "checksum"):
				t.Fatalf("launch after the pinned binary was replaced = %v, want a pin mismatch", err)
			case !pinned && err != nil:
				t.Fatal(err)
			case !pinned:
				defer e.Stop()
				if slices.Contains(stale, pidOf(t, e)) {
					t.Fatalf("launch got process %d, started from the replaced binary", pidOf(t, e))
				}
			}
			gone(t, stale...)
			if s := reg.PoolStatus("testexec"); s.Served != 0 || s.Stale != 2 {
				t.Fatalf("pool status %+v, want none served and both stale", s)
			}
			if pinned {
				if _, err := reg.Check(context.Background(), "testexec"); !errors.As(err, &ue) || ue.Check != "checksum" {
					t.Fatalf("check = %v, want a pin mismatch", err)
				}
			}
		})
	}
}

// A reload drains the pool: every process started under the verdict it
// replaces is killed, and only processes started since are handed out.
func TestPoolDrainedByReload(t *testing.T) {
	reg, spec := poolRegistry(t, testexecBin(t), "", 2, PluginOptions{})
	old := ready(t, reg, 2)
	reg.Reload(context.Background(), []PluginSpec{spec}, nil)
	gone(t, old...)
	fresh := ready(t, reg, 2)
	e, err := reg.Launch(context.Background(), "testexec", NoServices{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if pid := pidOf(t, e); slices.Contains(old, pid) || !slices.Contains(fresh, pid) {
		t.Fatalf("launch after the reload got %d; old %v, fresh %v", pid, old, fresh)
	}
	// A reload that turns the pool off leaves nothing waiting, and the
	// process a task took runs on.
	waiting := ready(t, reg, 2)
	spec.Prestart = 0
	reg.Reload(context.Background(), []PluginSpec{spec}, nil)
	gone(t, waiting...)
	if _, err := e.Describe(context.Background()); err != nil {
		t.Fatalf("the taken process did not survive the reload: %v", err)
	}
}

// A pooled process that dies while it waits is replaced, and never given
// to a launch: not even one that comes before its death was reaped.
func TestPoolProcessKilledWhileIdle(t *testing.T) {
	reg, _ := poolRegistry(t, testexecBin(t), "", 1, PluginOptions{})
	first := ready(t, reg, 1)
	if err := syscall.Kill(first[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var s PoolStatus
	testwait.Until(t, 30*time.Second, "a replacement of the killed pooled process", func() bool {
		s = reg.PoolStatus("testexec")
		return s.DiedIdle == 1 && s.Idle == 1 && s.PIDs[0] != first[0]
	})
	// Killed, and launched at once.
	if err := syscall.Kill(s.PIDs[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e, err := reg.Launch(context.Background(), "testexec", NoServices{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if pidOf(t, e) == s.PIDs[0] {
		t.Fatal("launch got the killed process")
	}
	if _, err := e.Describe(context.Background()); err != nil {
		t.Fatalf("the launched process does not answer: %v", err)
	}
}

// Closing the registry kills every pooled process.
func TestPoolClosedWithTheRegistry(t *testing.T) {
	opts := PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(t), "p")}
	reg, err := NewRegistry(opts)
	if err != nil {
		t.Fatal(err)
	}
	spec := PluginSpec{Kind: "testexec", Path: testexecBin(t), Confine: DefaultConfinement(), Prestart: 3}
	if err := reg.Register(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	pids := ready(t, reg, 3)
	reg.Close()
	gone(t, pids...)
	entries, err := os.ReadDir(opts.SocketDir)
	if err != nil || len(entries) != 0 {
		t.Fatalf("socket dir after close: %v %v", entries, err)
	}
}

// Each pooled process runs under a uid of its own, held while it waits,
// and the pool leaves UIDReserve uids free for running tasks.
func TestPoolUIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root daemon runs plugins under uids of their own")
	}
	pool, err := uids.NewPool(uids.Range{First: uids.DefaultFirst + 400200, Count: 5})
	if err != nil {
		t.Fatal(err)
	}
	// 5 uids, 2 reserved: the probe's comes back, then 3 pooled at most.
	reg, _ := poolRegistry(t, testexecBin(t), "", MaxPrestart, PluginOptions{UIDs: pool, UIDReserve: 2})
	pids := ready(t, reg, 3)
	seen := map[int]bool{}
	for _, pid := range pids {
		uid := procUID(t, pid)
		if !pool.Range().Contains(uid) || seen[uid] {
			t.Fatalf("pooled process %d runs as %d (pool %s, seen %v)", pid, uid, pool.Range(), seen)
		}
		seen[uid] = true
	}
	if free := pool.Free(); free != 2 {
		t.Fatalf("%d uids free, want the 2 reserved", free)
	}
	// A launch takes one; the refill stops at the reserve again.
	e, err := reg.Launch(context.Background(), "testexec", NoServices{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, pidOf(t, e)) {
		t.Fatalf("launch did not take a pooled process")
	}
	e.Stop()
	testwait.Until(t, 30*time.Second, "the pool back at 3 with 2 uids free", func() bool {
		return reg.PoolStatus("testexec").Idle == 3 && pool.Free() == 2
	})
}

func procUID(t *testing.T, pid int) int {
	t.Helper()
	uid, _ := strconv.Atoi(procUIDs(t, pid)[0])
	return uid
}

// procUIDs are pid's real, effective, saved and filesystem uids.
func procUIDs(t *testing.T, pid int) []string {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "Uid:" {
			return f[1:]
		}
	}
	t.Fatalf("no Uid line in\n%s", status)
	return nil
}

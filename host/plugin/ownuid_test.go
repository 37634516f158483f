package plugin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/internal/uids"
)

// A plugin with Confinement.OwnUID runs, under a root daemon, as a uid of
// the pool's — not the daemon's, and not the one another plugin holds —
// and its uid goes back to the pool, its processes killed, when it stops.
func TestOwnUIDPlugin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root daemon runs plugins under uids of their own")
	}
	pool, reg, spec := ownUIDRegistry(t, uids.DefaultFirst+400000, 8)
	uidOf := func(ec *executorClient) int {
		t.Helper()
		f := procUIDs(t, ec.proc.pid)
		for _, other := range f[1:] {
			if other != f[0] {
				t.Errorf("plugin uids %v differ", f)
			}
		}
		uid, _ := strconv.Atoi(f[0])
		return uid
	}
	a, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
	if err != nil {
		t.Fatal(err)
	}
	ua, ub := uidOf(a), uidOf(b)
	if !pool.Range().Contains(ua) || !pool.Range().Contains(ub) || ua == ub {
		t.Fatalf("plugins ran as %d and %d, want two uids of %s", ua, ub, pool.Range())
	}
	if _, err := a.Describe(context.Background()); err != nil {
		t.Fatalf("a plugin under its own uid does not answer: %v", err)
	}
	a.Stop()
	b.Stop()
	// Both uids are free again: the pool of 8 hands out all 8.
	var got []int
	for range 8 {
		u, err := pool.Acquire()
		if err != nil {
			t.Fatalf("after Stop: %v (got %v)", err, got)
		}
		got = append(got, u)
	}
}

// A read_write path its own uid cannot reach fails the plugin's start with
// the path and the fix, before a uid is taken or a process started: not a
// plugin that dies at its first write.
func TestOwnUIDPluginUnreachablePathFailsTheStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root daemon runs plugins under uids of their own")
	}
	pool, err := uids.NewPool(uids.Range{First: uids.DefaultFirst + 400100, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(t), "p"), UIDs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	c := DefaultConfinement()
	c.OwnUID = true
	c.ReadWrite = []string{testwait.ShortTempDir(t)} // 0700, the daemon's
	spec := PluginSpec{Kind: "testexec", Path: testexecBin(t), Confine: c}
	_, err = launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
	var ue *UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "read_write path "+c.ReadWrite[0]) || !strings.Contains(err.Error(), "mode 0700") {
		t.Fatalf("launch = %v, want unavailable naming the read_write path and its mode", err)
	}
	// The one uid of the pool was not taken, or was given back.
	u, err := pool.Acquire()
	if err != nil {
		t.Fatalf("the pool's uid is still held: %v", err)
	}
	_ = pool.Release(u)

	c.ReadWrite = []string{testwait.PluginDir(t)}
	spec.Confine = c
	ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
	if err != nil {
		t.Fatalf("a read_write path open to others: %v", err)
	}
	ec.Stop()
}

// A plugin's uid goes back to the pool without a kill once its cgroups
// were removed empty, and that is safe: anything of the uid left running —
// here a process in a session of its own, out of the plugin's process
// group, put in the plugin's cgroups as a fork of the plugin would be —
// dies with the cgroups, before the uid is handed out again.
func TestOwnUIDPluginLeftoverDiesWithItsCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root daemon runs plugins under uids of their own")
	}
	if set := cgroups.Find(true); !set.Limited() {
		t.Skipf("no cgroups here: %s", set.Why)
	}
	pool, reg, spec := ownUIDRegistry(t, uids.DefaultFirst+400100, 1)
	ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(procUIDs(t, ec.proc.pid)[0])
	left := exec.Command("/bin/sleep", "300")
	left.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = left.Process.Kill() })
	exited := make(chan struct{})
	go func() { _ = left.Wait(); close(exited) }()
	box := ec.proc.box
	for _, d := range append(box.Join(), cgroup2Dir(box)...) {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(left.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	ec.Stop()
	if !ec.proc.cgroupsEmptied() {
		t.Fatal("the plugin's cgroups were not removed empty")
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("a process of the plugin's uid in its cgroups outlived its Stop")
	}
	if got, err := pool.Acquire(); err != nil || got != uid {
		t.Fatalf("after Stop: Acquire = %d, %v; want %d back", got, err, uid)
	}
}

// ownUIDRegistry is a registry whose plugins take uids of a pool over
// count uids from first, closed at the test's end, and the test
// executor's spec with OwnUID.
func ownUIDRegistry(t *testing.T, first, count int) (*uids.Pool, *Registry, PluginSpec) {
	t.Helper()
	pool, err := uids.NewPool(uids.Range{First: first, Count: count})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(t), "p"), UIDs: pool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	c := DefaultConfinement()
	c.OwnUID = true
	return pool, reg, PluginSpec{Kind: "testexec", Path: testexecBin(t), Confine: c}
}

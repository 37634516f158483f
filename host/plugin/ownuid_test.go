package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
	pool, err := uids.NewPool(uids.Range{First: uids.DefaultFirst + 400000, Count: 8})
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
	spec := PluginSpec{Kind: "testexec", Path: testexecBin(t), Confine: c}
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

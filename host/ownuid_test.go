package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// Every plugin runs, under a root daemon, as a uid of its own (its spec:
// datadir's TestEveryPluginSpecTakesItsOwnUID).
func TestEveryPluginRunsUnderItsOwnUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root daemon runs plugins under uids of their own")
	}
	// A real legacy task, end to end, under its own uid: the embedded
	// script's first step writes a note, its second asks to run shell.run.
	h := openHost(t, "", shellNoApproval)
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: config.ExecutorLegacy, Spec: []byte(`{"goal":"write a report"}`)})
	if err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, store.ReasonNone)
	if entries, _ := os.ReadDir(filepath.Join(h.DataDir, datadir.WorkspaceDirName, task.ID)); len(entries) == 0 {
		t.Errorf("the legacy task left no file: %v", entries)
	}
	if s := h.Registry.Confinement(config.ExecutorLegacy); !strings.Contains(s, "own uid (") {
		t.Errorf("legacy confinement %q: want it to say it runs under its own uid", s)
	}
}

// machinespirit under a uid of its own still starts from a cached saved
// state: the daemon keeps the cache, each launch gets a copy, and only
// what a probe (serving no task) built goes back into it — a file a task's
// process leaves in its copy never does.
func TestPooledMachineSpiritStartsFromASeededCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root daemon runs plugins under uids of their own")
	}
	h := openHost(t, "", machineSpiritOn)
	cache := filepath.Join(h.DataDir, datadir.CacheDirName, config.ExecutorMachineSpirit)
	before, err := os.ReadDir(cache)
	if err != nil || len(before) == 0 {
		t.Fatalf("the probe at open left no saved state in %s: %v %v", cache, before, err)
	}
	launched := time.Now()
	e, err := h.Registry.Launch(context.Background(), config.ExecutorMachineSpirit, plugin.NoServices{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Runtime["saved_state"]; got != "cached" {
		t.Errorf("a launch under a uid of its own: saved_state %q, want cached", got)
	}
	// A task's process plants a file in its copy (found through its
	// private dir, its cwd): it must not reach the daemon's cache.
	planted := 0
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), "taskhost-plugin-*", "run-*", "seed-cache"))
	for _, dir := range matches {
		// A file system's clock is coarser than time.Now: a second's slack.
		if fi, err := os.Stat(dir); err != nil || fi.ModTime().Before(launched.Add(-time.Second)) {
			continue // another launch's, older than this one
		}
		if err := os.WriteFile(filepath.Join(dir, "state-planted"), []byte("x"), 0o600); err == nil {
			planted++
		}
	}
	if planted == 0 {
		t.Fatal("found no launch's seed-cache copy to plant in")
	}
	e.Stop()
	if _, err := os.Lstat(filepath.Join(cache, "state-planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a task launch's file reached the daemon's cache: %v", err)
	}
}

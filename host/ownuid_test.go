package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// The built-in legacy executor runs, under a root daemon, as a uid of its
// own (it needs nothing of the filesystem but its own dirs); an executor
// with read_write paths or a user of its own keeps what it was given.
func TestLegacyPluginRunsUnderItsOwnUID(t *testing.T) {
	cfg := testConfig(t)
	specs, err := executorSpecs(executorDir(t), testwait.ShortTempDir(t), "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if want := s.Kind == config.ExecutorLegacy; s.Confine.OwnUID != want {
			t.Errorf("%s: OwnUID %v, want %v", s.Kind, s.Confine.OwnUID, want)
		}
	}
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
	if entries, _ := os.ReadDir(filepath.Join(h.DataDir, WorkspaceDirName, task.ID)); len(entries) == 0 {
		t.Errorf("the legacy task left no file: %v", entries)
	}
	if s := h.Registry.Confinement(config.ExecutorLegacy); !strings.Contains(s, "own uid (") {
		t.Errorf("legacy confinement %q: want it to say it runs under its own uid", s)
	}
}

package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// Every plugin runs, under a root daemon, as a uid of its own; only an
// executor that names a user of its own runs as that user.
func TestEveryPluginRunsUnderItsOwnUID(t *testing.T) {
	cfg := testConfig(t)
	cfg.Executors["named"] = config.Executor{Path: "/bin/true", User: "nobody"}
	specs, err := executorSpecs(executorDir(t), testwait.ShortTempDir(t), "", true, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if want := s.Kind != "named"; s.Confine.OwnUID != want {
			t.Errorf("%s: OwnUID %v, want %v", s.Kind, s.Confine.OwnUID, want)
		}
		if slices.Contains(s.Args, "--state-cache-dir") {
			t.Errorf("%s: args %q: a pooled plugin is given a cache its uid could write", s.Kind, s.Args)
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

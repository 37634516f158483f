package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// copyExecutable copies src to dst (atomically, as a rebuild lands) with
// extra bytes appended — an ELF binary runs the same with them, yet hashes
// differently — and returns its SHA-256.
func copyExecutable(t *testing.T, src, dst string, extra string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, extra...)
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func wantUnavailable(t *testing.T, err error, check string) {
	t.Helper()
	var ue *plugin.UnavailableError
	if !errors.As(err, &ue) || ue.Check != check {
		t.Fatalf("error %v, want an executor unavailable (%s)", err, check)
	}
}

func taskCount(t *testing.T, h *Host) int {
	t.Helper()
	ts, err := h.Runner.List(context.Background(), alice, store.ListQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(ts)
}

// A pinned executor binary rebuilt under a running host: create and resume
// are refused with the pin mismatch (nothing created, nothing moved) and
// Describe says so; a reload with the new pin lets them through, and a task
// running across the reload completes on the binary it started from.
func TestRebuiltPinnedBinaryRefusedUntilReload(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(testwait.ShortTempDir(t), "testexec")
	sum := copyExecutable(t, filepath.Join(executorDir(t), datadir.ExecutorPrefix+"testexec"), bin, "")
	cfg := testConfig(t)
	ex := cfg.Executors["testexec"]
	ex.Path, ex.SHA256 = bin, sum
	cfg.Executors["testexec"] = ex
	h := openHost(t, "", func(c *config.Config) { *c = cfg })

	dir := testwait.PluginDir(t)
	gate := filepath.Join(dir, "go")
	running := create(t, h, alice, map[string]any{"steps": 2, "wait_file": gate}, Limits{})
	interrupted := create(t, h, alice, map[string]any{"exit_at_attempt": 1, "steps": 2}, Limits{})
	wantStatus(t, waitEnd(t, h, alice, interrupted.ID), store.StatusInterrupted, store.ReasonExecutorCrashed)

	newSum := copyExecutable(t, filepath.Join(executorDir(t), datadir.ExecutorPrefix+"testexec"), bin, "rebuilt")
	before := taskCount(t, h)
	_, err := h.Runner.Create(context.Background(), alice, CreateRequest{Spec: spec(t, "after rebuild", nil)})
	wantUnavailable(t, err, "checksum")
	if n := taskCount(t, h); n != before {
		t.Errorf("a refused create left %d tasks, want %d", n, before)
	}
	_, err = h.Runner.Resume(context.Background(), alice, interrupted.ID)
	wantUnavailable(t, err, "checksum")
	if got, _ := h.Runner.Get(context.Background(), alice, interrupted.ID); got.Status != store.StatusInterrupted || got.RunID != 1 {
		t.Errorf("a refused resume moved the task: %s run %d", got.Status, got.RunID)
	}
	_, err = h.Registry.Describe("testexec")
	wantUnavailable(t, err, "checksum")

	ex.SHA256 = newSum
	cfg.Executors["testexec"] = ex
	if err := h.ReloadExecutors(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Registry.Describe("testexec"); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	wantStatus(t, waitEnd(t, h, alice, create(t, h, alice, nil, Limits{}).ID), store.StatusCompleted, "")
	if _, err := h.Runner.Resume(context.Background(), alice, interrupted.ID); err != nil {
		t.Fatalf("resume after the reload: %v", err)
	}
	// The task that ran through all of it finishes.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, running.ID), store.StatusCompleted, "")
}

// An unpinned binary is checked again too: one that no longer completes
// the handshake, and one that is gone, are refused at create with what
// failed; putting the good binary back needs no reload.
func TestChangedUnpinnedBinaryCheckedAtCreate(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(testwait.PluginDir(t), "testexec")
	good := filepath.Join(executorDir(t), datadir.ExecutorPrefix+"testexec")
	copyExecutable(t, good, bin, "")
	h := openHost(t, "", func(c *config.Config) {
		ex := c.Executors["testexec"]
		ex.Path = bin
		c.Executors["testexec"] = ex
	})
	for _, tc := range []struct {
		name      string
		change    func()
		wantCheck string
	}{
		{name: "exits before the handshake", change: func() {
			if err := os.WriteFile(bin+".new", []byte("#!/bin/sh\necho broken >&2\nexit 2\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(bin+".new", bin); err != nil {
				t.Fatal(err)
			}
		}, wantCheck: "handshake"},
		{name: "removed", change: func() {
			if err := os.Remove(bin); err != nil {
				t.Fatal(err)
			}
		}, wantCheck: "binary"},
		{name: "the good one back", change: func() { copyExecutable(t, good, bin, "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.change()
			task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Spec: spec(t, tc.name, nil)})
			if tc.wantCheck != "" {
				wantUnavailable(t, err, tc.wantCheck)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
		})
	}
}

// BenchmarkRegistryCheck: the live check of an unchanged binary against
// the registered verdict it falls back to (Describe), in the same run.
func BenchmarkRegistryCheck(b *testing.B) {
	dir, err := os.MkdirTemp("", "thb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	r, err := plugin.NewRegistry(plugin.PluginOptions{SocketDir: filepath.Join(dir, "p")})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ex := testConfig(b).Executors["testexec"]
	if err := r.Register(context.Background(), plugin.PluginSpec{Kind: "testexec", Path: ex.Path, Confine: plugin.DefaultConfinement()}); err != nil {
		b.Fatal(err)
	}
	b.Run("describe", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.Describe("testexec"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check_unchanged", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.Check(context.Background(), "testexec"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

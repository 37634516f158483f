package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

func testexecSum(t *testing.T) string {
	t.Helper()
	return fileSum(t, filepath.Join(executorDir(t), datadir.ExecutorPrefix+"testexec"))
}

// fileSum is the hex SHA-256 of path, as sha256sum prints it.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Every way a plugin can fail to start makes its executor unavailable with a
// message that says which check failed; selecting it is refused and leaves
// no row.
func TestExecutorUnavailable(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(executorDir(t), datadir.ExecutorPrefix+"testexec")
	notExec := filepath.Join(testwait.ShortTempDir(t), "plain-file")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		ex     config.Executor
		check  string
		detail string
	}{
		{"missing binary", config.Executor{Path: "/nonexistent/taskhost-executor-x"}, "binary", "no such file"},
		{"not executable", config.Executor{Path: notExec}, "binary", "not an executable"},
		{"sha256 mismatch", config.Executor{Path: bin, SHA256: strings.Repeat("0", 64)}, "checksum", "config pins"},
		{"bad handshake", config.Executor{Path: bin, Args: []string{"-startup=badhandshake"}}, "handshake", ""},
		{"stdout noise before serve", config.Executor{Path: bin, Args: []string{"-startup=noise"}}, "handshake", ""},
		{"exits before serve", config.Executor{Path: bin, Args: []string{"-startup=exit"}}, "handshake", ""},
		{"start timeout", config.Executor{Path: bin, Args: []string{"-startup=hang"}}, "start_timeout", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			h := openHost(t, "", func(c *config.Config) {
				c.Executors = map[string]config.Executor{"broken": tc.ex}
				c.Limits.PluginStartSeconds = 1
			})
			_, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "broken", Spec: spec(t, "x", nil)})
			var ue *plugin.UnavailableError
			if !errors.As(err, &ue) || ue.Check != tc.check || !strings.Contains(ue.Detail, tc.detail) {
				t.Fatalf("err = %v, want unavailable (%s) mentioning %q", err, tc.check, tc.detail)
			}
			if !errors.Is(err, plugin.ErrExecutorUnavailable) {
				t.Errorf("err does not match plugin.ErrExecutorUnavailable")
			}
			if tasks, _ := h.Runner.List(context.Background(), alice, store.ListQuery{}); len(tasks) != 0 {
				t.Errorf("a refused create left %d rows", len(tasks))
			}
			t.Logf("%s: %v (in %v)", tc.name, err, time.Since(start).Round(time.Millisecond))
		})
	}
}

func TestExecutorPinnedBySHA256(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(executorDir(t), datadir.ExecutorPrefix+"testexec")
	h := openHost(t, "", func(c *config.Config) {
		c.Executors = map[string]config.Executor{"testexec": {Path: bin, SHA256: testexecSum(t)}}
	})
	task := create(t, h, alice, nil, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
}

func TestDescribeRecorded(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	d, err := h.Registry.Describe("testexec")
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != "testexec" || d.ProtocolVersion != 2 || !d.Accepts("testexec/1") {
		t.Fatalf("description = %+v", d)
	}
	if _, err := h.Registry.Describe("machinespirit"); !errors.Is(err, plugin.ErrExecutorUnavailable) || !strings.Contains(err.Error(), "enabled = true") {
		t.Fatalf("machinespirit while disabled: %v", err)
	}
}

func TestSocketDirSweptAtStart(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	stale := filepath.Join(dir, datadir.SocketDirName, "plugin-dir123", "plugin456")
	if err := os.MkdirAll(filepath.Dir(stale), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	openHost(t, dir, nil)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale socket survived the start: %v", err)
	}
}

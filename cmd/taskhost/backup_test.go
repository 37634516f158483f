package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
)

// The commands of docs/operations.md's backup and restore, in order: a
// data dir is backed up, restored into a new directory, and a daemon
// opens the restored one.
func TestBackupRestoreCommands(t *testing.T) {
	base, err := os.MkdirTemp("", "bk") // short: socket paths are capped
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	src := filepath.Join(base, "data")
	h, err := host.Open(context.Background(), host.Options{DataDir: src, Config: config.Default()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(src, datadir.KeyFile))
	if err != nil {
		t.Fatal(err)
	}

	backup := filepath.Join(base, "backup")
	out, errOut, code := runCLI(t, "", "backup", "--data-dir", src, backup)
	if code != exitOK || !strings.Contains(out, "wrote "+backup) {
		t.Fatalf("backup: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "", "backup", "--data-dir", src, backup); code != exitUnavailable || !strings.Contains(errOut, "already exists") {
		t.Fatalf("backup over a backup: exit %d, %q", code, errOut)
	}

	restored := filepath.Join(base, "restored")
	if _, errOut, code := runCLI(t, "", "restore", backup); code != exitUsage || !strings.Contains(errOut, "--data-dir is required") {
		t.Fatalf("restore without --data-dir: exit %d, %q", code, errOut)
	}
	out, errOut, code = runCLI(t, "", "restore", backup, "--data-dir", restored, "--json")
	if code != exitOK || !strings.Contains(out, `"checkpoints_verified":0`) {
		t.Fatalf("restore: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "", "restore", backup, "--data-dir", restored); code != exitConflict || !strings.Contains(errOut, "is not empty") {
		t.Fatalf("restore over the restored dir: exit %d, %q", code, errOut)
	}
	got, err := os.ReadFile(filepath.Join(restored, datadir.KeyFile))
	if err != nil || string(got) != string(key) {
		t.Fatalf("restored key differs from the original (%v)", err)
	}
	h, err = host.Open(context.Background(), host.Options{DataDir: restored, Config: config.Default()})
	if err != nil {
		t.Fatalf("a daemon refuses the restored data dir: %v", err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

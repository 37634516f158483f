//go:build linux

package sdk

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"
)

// waitExit returns when the process exits, not before; when its context
// ends; and at once when the pid no longer names the process meant.
func TestWaitExit(t *testing.T) {
	start := func(t *testing.T) *exec.Cmd {
		t.Helper()
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	always := func() bool { return true }

	t.Run("exit", func(t *testing.T) {
		cmd := start(t)
		done := make(chan error, 1)
		go func() { done <- waitExit(context.Background(), cmd.Process.Pid, always) }()
		select {
		case err := <-done:
			t.Fatalf("waitExit returned %v while the process runs", err)
		case <-time.After(100 * time.Millisecond):
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if errors.Is(err, errNoPidfd) {
				t.Skip("this kernel gives no pidfd: the watch polls")
			}
			if err != nil {
				t.Fatalf("waitExit = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waitExit did not return 10 s after the process was killed")
		}
	})
	t.Run("context", func(t *testing.T) {
		cmd := start(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- waitExit(ctx, cmd.Process.Pid, always) }()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) && !errors.Is(err, errNoPidfd) {
				t.Fatalf("waitExit = %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waitExit did not return 10 s after its context ended")
		}
	})
	t.Run("pid reused", func(t *testing.T) {
		cmd := start(t)
		if err := waitExit(context.Background(), cmd.Process.Pid, func() bool { return false }); err != nil && !errors.Is(err, errNoPidfd) {
			t.Fatalf("waitExit = %v, want nil at once", err)
		}
	})
}

//go:build linux

package sdk

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOrphanedPluginExits kills a host-like process with SIGKILL and checks
// that its plugin-like child, running the SDK's parent watch, exits with
// status 3 on its own.
//
// The test process makes itself a child subreaper so that the orphan is
// reparented to it rather than to init: it can then wait for it and read
// its exit status, which does not depend on what pid 1 is in this
// container.
func TestOrphanedPluginExits(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a child subreaper: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })

	// An *os.File, not a buffer: exec would otherwise wait for the orphan
	// to close its inherited end.
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()

	middle := helperCommand("middle")
	middle.Stderr = stderr
	out, err := middle.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := middle.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = middle.Process.Kill()
		_ = middle.Wait()
	})

	ready := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if pid, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				n, _ := strconv.Atoi(pid)
				ready <- n
				return
			}
		}
	}()
	var pid int
	select {
	case pid = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("watcher did not report ready")
	}
	reaped := false
	t.Cleanup(func() {
		// Until it is reaped the watcher's pid cannot be reused, so this
		// kills nothing else.
		if !reaped {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_, _ = syscall.Wait4(pid, nil, 0, nil)
		}
	})

	killed := time.Now()
	if err := middle.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = middle.Wait() // reaps the middle; the watcher is now our child

	deadline := killed.Add(5 * time.Second)
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if err != nil {
			t.Fatalf("wait for the orphan (pid %d): %v", pid, err)
		}
		if got == pid {
			reaped = true
			if !ws.Exited() || ws.ExitStatus() != orphanExitCode {
				t.Fatalf("orphan ended with %v, want exit status %d", ws, orphanExitCode)
			}
			t.Logf("orphan exited %v after its parent was killed", time.Since(killed).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan (pid %d) still running 5s after its parent was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}

	logged, err := os.ReadFile(stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), "host process is gone") {
		t.Errorf("orphan did not log why it exited; stderr:\n%s", logged)
	}
}

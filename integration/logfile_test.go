package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// `serve --log-file` writes its log to a 0600 file; a rotation's
// rename-then-SIGHUP moves the log to a fresh file, and the daemon serves
// on.
func TestServeLogFileReopenedOnSIGHUP(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	logPath := filepath.Join(work, "taskhost.log")
	cmd := exec.Command(filepath.Join(binDir, "taskhost"), "serve", "--data-dir", data, "--log-file", logPath, "--log-format", "json", "--log-level", "info")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return string(b)
	}
	testwait.Until(t, 30*time.Second, "the serving line in the log file", func() bool { return strings.Contains(read(logPath), `"serving"`) })
	if fi, err := os.Stat(logPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("log file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}

	rotated := logPath + ".1"
	if err := os.Rename(logPath, rotated); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "the SIGHUP line in a new log file", func() bool { return strings.Contains(read(logPath), "SIGHUP received") })
	if strings.Contains(read(rotated), "SIGHUP received") {
		t.Errorf("a line after the reopen went to the rotated file")
	}
	if out, errOut, code := taskhost(t, "task", "list", "--data-dir", data); code != 0 {
		t.Fatalf("after SIGHUP: task list exit %d\n%s%s", code, out, errOut)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop after SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q: want 0 and nothing on stderr", code, stderr.String())
	}
	if !strings.Contains(read(logPath), `"stopped"`) {
		t.Errorf("the stop was not logged to the new file:\n%s", read(logPath))
	}
}

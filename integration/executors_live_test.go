package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// rebuild puts a copy of the test executor at dst, as a rebuild lands
// (write, then rename over), with extra bytes appended so that it hashes
// differently but runs the same; it returns the new SHA-256.
func rebuild(t *testing.T, dst, extra string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(binDir, "taskhost-executor-testexec"))
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, extra...)
	if err := os.WriteFile(dst+".new", data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// pinnedConfig (re)writes work's config pinning bin at sum.
func pinnedConfig(t *testing.T, work, bin, sum string) string {
	t.Helper()
	return writeConfig(t, work, fmt.Sprintf("[executors.testexec]\npath = %q\nsha256 = %q\nread_write = [%q]\n", bin, sum, work))
}

// The executor binary rebuilt under a running daemon: create is refused
// (exit 5, the pin mismatch said) and `executors` shows it; a new pin in
// the config applied by `executors reload`, and again by SIGHUP, lets
// creates through, while a task running across both reloads completes.
func TestExecutorRebuiltUnderDaemon(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	bin := filepath.Join(work, "testexec")
	cfg := pinnedConfig(t, work, bin, rebuild(t, bin, ""))
	d := startDaemon(t, data, cfg)
	gate := filepath.Join(work, "go")
	running := createTask(t, d, work, map[string]any{"goal": "outlive the reloads", "testexec": map[string]any{"steps": 2, "wait_file": gate}})

	sum := rebuild(t, bin, "rebuilt once")
	spec := writeSpec(t, work, map[string]any{"goal": "after the rebuild"})
	out, errOut, code := d.cli(t, "task", "create", "--executor", "testexec", "--spec-file", spec)
	if code != 5 || !strings.Contains(errOut, "config pins") {
		t.Fatalf("create after a rebuild: exit %d, stderr %q; want 5 and the pin mismatch\n%s", code, errOut, out)
	}
	var list listJSON
	d.cliJSON(t, &list, "task", "list")
	if len(list.Tasks) != 1 {
		t.Errorf("a refused create left a task: %+v", list.Tasks)
	}
	out, _, code = d.cli(t, "executors")
	if code != 0 || !strings.Contains(out, "pin mismatch") {
		t.Fatalf("executors (exit %d) does not show the pin mismatch:\n%s", code, out)
	}

	pinnedConfig(t, work, bin, sum)
	if out, errOut, code := d.cli(t, "executors", "reload"); code != 0 || strings.Contains(out, "pin mismatch") {
		t.Fatalf("executors reload: exit %d\n%s%s", code, out, errOut)
	}
	createTask(t, d, work, map[string]any{"goal": "after reload"})

	// Once more through SIGHUP.
	sum = rebuild(t, bin, "rebuilt twice")
	if _, _, code := d.cli(t, "task", "create", "--executor", "testexec", "--spec-file", spec); code != 5 {
		t.Fatalf("create after the second rebuild: exit %d, want 5", code)
	}
	pinnedConfig(t, work, bin, sum)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "the reload by SIGHUP", func() bool {
		return strings.Contains(d.logText(), "executor config reloaded; the daemon keeps running")
	})
	createTask(t, d, work, map[string]any{"goal": "after SIGHUP"})

	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if final, code := startWatch(t, d, running).result(t); code != 0 || final.Status != "completed" {
		t.Fatalf("the task running across the reloads ended %s (%s), exit %d", final.Status, final.Reason, code)
	}
}

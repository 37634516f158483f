package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// A hostile approved shell.run through the real binaries: the command,
// approved with --approve-all, tries to read host.key and the store and the
// daemon's environ, and leaves a setsid'd process behind. Each read is
// refused, the secret stays out of its output, and the process dies with
// the call.
//
// Serial: t.Setenv (the daemon's secret in its environment).
func TestHostileShellRunThroughTaskhost(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid not installed")
	}
	const canary = "sk-canary-shellrun-4b1e"
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	command := fmt.Sprintf(`for f in %s %s /proc/$PPID/environ; do cat "$f" >> probe.out 2>&1 || echo "refused $f" >> probe.out; done
setsid sh -c 'echo $$ > bg.pid; exec sleep 346' & while [ ! -s bg.pid ]; do :; done; echo started`,
		filepath.Join(data, "host.key"), filepath.Join(data, "taskhost.db"))
	script := map[string]any{"version": 1, "rules": []any{
		map[string]any{"when": map[string]any{"last_role": "user", "contains": " step 1/"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "shell.run", "arguments": map[string]any{"command": command}}}}},
		map[string]any{"when": map[string]any{}, "reply": map[string]any{"content": "TASK_COMPLETE: done"}},
	}}
	raw, _ := json.Marshal(script)
	scriptFile, cfg := filepath.Join(work, "script.json"), filepath.Join(work, "c.toml")
	if err := os.WriteFile(scriptFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[model]\nscript = %q\n", scriptFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", canary) // the daemon's secret, in its environ

	out, errOut, code := taskhost(t, "run", "--data-dir", data, "--config", cfg, "--executor", "legacy", "--goal", "probe", "--approve-all")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	// The approval showed the command itself, escaped onto one line.
	if !strings.Contains(errOut, `shell.run: for f in `) || !strings.Contains(errOut, `probe.out; done\nsetsid`) {
		t.Errorf("the approval did not show the command:\n%s", errOut)
	}
	id := strings.Fields(out[strings.Index(out, "task t_"):])[1]
	ws := filepath.Join(data, "workspaces", id)
	probe, err := os.ReadFile(filepath.Join(ws, "probe.out"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(filepath.Join(data, "host.key"))
	if len(key) == 0 || strings.Contains(string(probe), string(key)) || strings.Contains(string(probe), canary) ||
		strings.Count(string(probe), "refused ") != 3 || !strings.Contains(string(probe), "Permission denied") {
		t.Fatalf("the probes were not all refused:\n%s", probe)
	}
	pid := readPid(t, filepath.Join(ws, "bg.pid"))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	testwait.Until(t, 10*time.Second, "the setsid'd process to die with its command", func() bool { return !alive(pid) })
}

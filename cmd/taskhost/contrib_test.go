package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The systemd unit in contrib/ is the one docs/operations.md shows, and
// systemd itself accepts it.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("../../contrib/taskhost.service")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```ini\n"+string(unit)+"```\n") {
		t.Errorf("docs/operations.md does not show contrib/taskhost.service as it is: copy it into the ini block")
	}
	for _, want := range []string{"ExecReload=/bin/kill -HUP $MAINPID", "Delegate=yes", "KillMode=mixed", "NoNewPrivileges=yes"} {
		if !strings.Contains(string(unit), "\n"+want+"\n") {
			t.Errorf("the unit lacks %q", want)
		}
	}
	for _, bad := range []string{"ProtectControlGroups=yes", "SystemCallFilter=", "ProtectKernelTunables=yes"} {
		if strings.Contains(string(unit), "\n"+bad) {
			t.Errorf("the unit sets %q, which breaks the daemon's own confinement", bad)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit's syntax is not checked")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// verify wants the ExecStart binary to exist: point it at this one.
	path := filepath.Join(t.TempDir(), "taskhost.service")
	text := strings.ReplaceAll(string(unit), "/usr/local/bin/taskhost", exe)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// status on a socket nobody listens on says the daemon is down, on stdout
// in both modes, and exits 5 (unavailable), not 1 or 2.
func TestStatusDeadSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nobody.sock")
	out, errOut, code := runCLI(t, "", "status", "--socket", sock, "--json")
	var v statusView
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != exitUnavailable || v.Up || v.Error == "" || v.Target != "unix socket "+sock {
		t.Fatalf("exit %d, %+v, %v\n%s%s", code, v, err, out, errOut)
	}
	out, _, code = runCLI(t, "", "status", "--socket", sock)
	if code != exitUnavailable || !strings.HasPrefix(out, "daemon     down: no taskhost daemon answers on unix socket "+sock) {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if _, _, code := runCLI(t, "", "status", "extra", "--socket", sock); code != exitUsage {
		t.Fatalf("an argument: exit %d, want %d", code, exitUsage)
	}
}

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testwait"
)

// taskhost run with machinespirit: the rlm graph completes with the shipped
// scripted model; disabled, or pinned to a version the machine lacks, the
// same command is refused with the reason.
func TestMachineSpiritRun(t *testing.T) {
	work := testwait.ShortTempDir(t)
	spec, _ := filepath.Abs("../examples/machinespirit/rlm.json")
	ctxFile, _ := filepath.Abs("../examples/machinespirit/ctx.txt")
	n := 0
	conf := func(body string) string {
		n++
		p := filepath.Join(work, fmt.Sprintf("c%d.toml", n))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	on := conf("[machine_spirit]\nenabled = true\n")
	out, errOut, code := taskhost(t, "run", "--data-dir", filepath.Join(work, "d"), "--config", on,
		"--executor", "machinespirit", "--spec-file", spec, "--file", ctxFile)
	if code != 0 || !strings.Contains(out, "completed after") || !strings.Contains(out, `"answer"`) {
		t.Fatalf("rlm: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, tc := range []struct{ name, config, want string }{
		{"disabled", "", "enabled = true"},
		{"wrong version", "[machine_spirit]\nenabled = true\nswipl_version = \"9.0.3\"\n", "9.0.3"},
	} {
		args := []string{"run", "--data-dir", filepath.Join(work, "d"), "--executor", "machinespirit", "--spec-file", spec}
		if tc.config != "" {
			args = append(args, "--config", conf(tc.config))
		}
		_, errOut, code := taskhost(t, args...)
		if code != 5 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 5 naming %q", tc.name, code, errOut, tc.want)
		}
	}
}

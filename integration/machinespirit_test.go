package integration

import (
	"crypto/sha256"
	"encoding/hex"
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

// An operator handler module named in [machine_spirit.handler_modules]:
// pinned, the executor starts with it loaded and runs a task; the file
// changed after its pin, the executor is refused naming both hashes.
func TestMachineSpiritHandlerModule(t *testing.T) {
	work := testwait.ShortTempDir(t)
	// The plugin may run under a uid of the pool: the module is read
	// through its "others" bits.
	mods := testwait.ShortTempDir(t)
	if err := os.Chmod(mods, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "handler_decl(shout(_)).\nhandler(shout(F), Env, _, patch([F=L])) :- get_dict(goal, Env, G), string_upper(G, L).\n"
	mod := filepath.Join(mods, "shout.pl")
	if err := os.WriteFile(mod, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(src))
	pin := hex.EncodeToString(sum[:])
	conf := filepath.Join(work, "c.toml")
	body := fmt.Sprintf("[machine_spirit]\nenabled = true\n[machine_spirit.handler_modules.shout]\npath = %q\nsha256 = %q\n", mod, pin)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	spec, _ := filepath.Abs("../examples/machinespirit/plan-act-review.json")
	run := func() (string, string, int) {
		return taskhost(t, "run", "--data-dir", filepath.Join(work, "d"), "--config", conf, "--executor", "machinespirit", "--spec-file", spec)
	}
	if out, errOut, code := run(); code != 0 || !strings.Contains(out, "completed after") {
		t.Fatalf("with a pinned module: exit %d\n%s\n%s", code, out, errOut)
	}
	if err := os.WriteFile(mod, []byte(strings.Replace(src, "string_upper", "string_lower", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run()
	if code != 5 || !strings.Contains(errOut, "handler_module: "+mod+" has SHA-256 ") || !strings.Contains(errOut, "pinned "+pin) {
		t.Fatalf("a tampered module: exit %d, stderr %q; want exit 5 naming the file and both hashes", code, errOut)
	}
}

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
	t.Parallel()
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
	if code != 0 || !strings.Contains(out, " completed: steps ") || !strings.Contains(out, `"answer"`) {
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
	t.Parallel()
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
	if out, errOut, code := run(); code != 0 || !strings.Contains(out, " completed: steps ") {
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

// An operator graph under the daemon: [machine_spirit] graphs_dir and
// graph_pins load a pinned graph whose node is a handler module's; the
// task completes and the handler's workspace write is there. A graph
// changed after its pin makes the executor unavailable, naming both hashes.
func TestMachineSpiritOperatorGraph(t *testing.T) {
	t.Parallel()
	work := testwait.ShortTempDir(t)
	// The plugin may run under a uid of the pool: the files are read
	// through their "others" bits.
	files := testwait.ShortTempDir(t)
	if err := os.Chmod(files, 0o755); err != nil {
		t.Fatal(err)
	}
	pinOf := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	write := func(name, src string) string {
		t.Helper()
		p := filepath.Join(files, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mod := "handler_decl(shout(_)).\n" +
		"handler(shout(F), Env, _, patch([F=L])) :- get_dict(goal, Env, G), string_upper(G, L),\n" +
		"    tool('workspace.write', _{path: \"shout.txt\", content: L}, _).\n"
	graph := "graph(shouter, [\n  state([field(loud, string, \"\", replace)]),\n" +
		"  nodes([node(a, shout(loud))]),\n  edges([edge(start, a), edge(a, end)]),\n  output([loud])\n]).\n"
	modPath := write("shout.pl", mod)
	graphPath := write("shouter.pl", graph)
	conf := filepath.Join(work, "c.toml")
	body := fmt.Sprintf("[machine_spirit]\nenabled = true\ngraphs_dir = %q\n[machine_spirit.graph_pins]\nshouter = %q\n"+
		"[machine_spirit.handler_modules.shout]\npath = %q\nsha256 = %q\n", files, pinOf(graph), modPath, pinOf(mod))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := write("spec.json", `{"goal": "make it loud", "machinespirit": {"graph": "shouter"}}`)
	data := filepath.Join(work, "d")
	run := func() (string, string, int) {
		return taskhost(t, "run", "--data-dir", data, "--config", conf, "--executor", "machinespirit", "--spec-file", spec)
	}
	out, errOut, code := run()
	if code != 0 || !strings.Contains(out, " completed: steps ") {
		t.Fatalf("an operator graph with a module's handler: exit %d\n%s\n%s", code, out, errOut)
	}
	var id string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "task" && strings.HasPrefix(f[1], "t_") {
			id = f[1]
			break
		}
	}
	if got, err := os.ReadFile(filepath.Join(data, "workspaces", id, "shout.txt")); err != nil || string(got) != "MAKE IT LOUD" {
		t.Fatalf("the handler's write: %q, %v (task %q)\n%s", got, err, id, out)
	}
	write("shouter.pl", strings.Replace(graph, "shout(loud)", "shout(loud) ", 1))
	_, errOut, code = run()
	if code != 5 || !strings.Contains(errOut, graphPath+" has SHA-256 ") || !strings.Contains(errOut, "pinned "+pinOf(graph)) {
		t.Fatalf("a changed graph: exit %d, stderr %q; want exit 5 naming the file and both hashes", code, errOut)
	}
}

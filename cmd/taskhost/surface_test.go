package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestCLISurface pins what scripts and docs/cli.md rely on: the exit
// codes, every command with the flags its --help lists and the codes of
// --help and of an unknown flag, and the shape (key paths and value types)
// of every --json output. It is read from the binary's own behaviour, so
// it holds whatever parses the command line; a flag or a JSON key that
// disappears or changes fails it. After a deliberate change: update
// docs/cli.md, then go test -update.
func TestCLISurface(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "exit codes: ok=%d failed=%d usage=%d not_found=%d conflict=%d unavailable=%d interrupted=%d denied=%d signal=%d\n",
		exitOK, exitFailed, exitUsage, exitNotFound, exitConflict, exitUnavailable, exitInterrupted, exitDenied, exitSignal)
	// The bulk forms of cancel, pause and resume parse their own flags.
	bulk := [][]string{{"task", "cancel", "--all"}, {"task", "pause", "--all"}, {"task", "resume", "--all"}, {"task", "resume", "--all-interrupted"}}
	for _, path := range append(leafCommands(t, nil), bulk...) {
		help, helpCode := helpOf(t, path)
		_, errOut, badCode := runCLI(t, "", append(slices.Clone(path), "--no-such-flag", "--json")...)
		fmt.Fprintf(&b, "\ntaskhost %s\n  flags: %s\n  exit: --help=%d --no-such-flag=%d\n  json error: %s\n",
			strings.Join(path, " "), strings.Join(helpFlags(help), " "), helpCode, badCode, jsonShape(t, errOut))
	}
	sock := startFakeAPI(t)
	fmt.Fprintln(&b)
	for _, c := range jsonCases() {
		out, errOut, code := runCLI(t, c.stdin, append(slices.Clone(c.args), "--json", "--socket", sock)...)
		got := out
		if c.stderr {
			got = errOut
		}
		fmt.Fprintf(&b, "json taskhost %s (exit %d):\n", strings.Join(c.args, " "), code)
		var seen []string
		for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
			if s := jsonShape(t, line); !slices.Contains(seen, s) {
				seen = append(seen, s)
				fmt.Fprintf(&b, "  %s\n", s)
			}
		}
	}
	fmt.Fprintln(&b, "json taskhost run --json --approve-all (exit 0):")
	runShape(t, &b)
	for _, args := range [][]string{{"completion", "bash"}, {"completion", "zsh"}, {"completion", "fish"}, {"completion", "tcsh"}, {"version"}} {
		_, _, code := runCLI(t, "", args...)
		fmt.Fprintf(&b, "exit taskhost %s: %d\n", strings.Join(args, " "), code)
	}
	pinned(t, "cli_surface.golden", b.String())
}

// runShape runs a task that asks for an approval with `taskhost run --json
// --approve-all` and writes the shape of each kind of line it prints (an
// event's payload differs by type: only the event's own keys are pinned).
func runShape(t *testing.T, b *strings.Builder) {
	t.Helper()
	dir, err := testexecDir()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	cfg := filepath.Join(work, "taskhost.toml")
	conf := fmt.Sprintf("[executors.testexec]\npath = %q\n", filepath.Join(dir, "taskhost-executor-testexec"))
	spec := filepath.Join(work, "spec.json")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte(`{"goal": "g", "testexec": {"steps": 2, "request_approval": true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "", "run", "--data-dir", filepath.Join(work, "data"), "--config", cfg, "--executor", "testexec",
		"--spec-file", spec, "--json", "--approve-all")
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("run --json: not a JSON line: %q", line)
		}
		s := jsonShape(t, line)
		if ev.Kind == "event" {
			s = regexp.MustCompile(`payload\.\S+`).ReplaceAllString(s, "payload:{...}")
			s = strings.Join(slices.Compact(strings.Fields(s)), " ")
		}
		if !slices.Contains(lines, s) {
			lines = append(lines, s)
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintf(b, "  %s\n", l)
	}
	if !strings.Contains(errOut, "approved automatically (--approve-all)") {
		t.Fatalf("run --approve-all did not approve the task's approval:\n%s", errOut)
	}
}

// pinned compares got with testdata/NAME (go test -update rewrites it).
func pinned(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	want, ok := goldenFile(t, path, got)
	if ok {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gl), len(wl)) {
		g, w := "", ""
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("the command line's surface changed (%s line %d): a documented flag, exit code or --json key is gone or new;\nupdate docs/cli.md, then go test -update\n got: %s\nwant: %s", path, i+1, g, w)
		}
	}
}

// helpOf runs "taskhost PATH... --help" and returns what it printed and
// its exit code.
func helpOf(t *testing.T, path []string) (string, int) {
	t.Helper()
	out, errOut, code := runCLI(t, "", append(slices.Clone(path), "--help")...)
	return out + errOut, code
}

var (
	helpCommandRE = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s+\S`)
	// "  -name type" (the flag package) or "  -n, --name type" (pflag).
	helpFlagRE = regexp.MustCompile(`^\s{2,6}(?:-[a-zA-Z], )?--?([a-z][a-z0-9-]*)`)
)

// leafCommands lists the commands under path that run something, as the
// help of each lists them ("Commands:").
func leafCommands(t *testing.T, path []string) [][]string {
	t.Helper()
	help, _ := helpOf(t, path)
	var subs []string
	section := false
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasSuffix(line, "Commands:"):
			section = true
		case strings.TrimSpace(line) == "":
			section = false
		case section:
			if m := helpCommandRE.FindStringSubmatch(line); m != nil && m[1] != "help" {
				subs = append(subs, m[1])
			}
		}
	}
	if len(subs) == 0 {
		return [][]string{path}
	}
	var out [][]string
	for _, s := range subs {
		out = append(out, leafCommands(t, append(slices.Clone(path), s))...)
	}
	return out
}

// helpFlags are the flags a command's help lists (its "Flags:" section),
// sorted, without the help flag itself.
func helpFlags(help string) []string {
	var flags []string
	section := false
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, "Flags:") {
			section = true
			continue
		}
		if m := helpFlagRE.FindStringSubmatch(line); section && m != nil && m[1] != "help" {
			flags = append(flags, strings.Repeat("-", min(len(m[1]), 2))+m[1])
		}
	}
	sort.Strings(flags)
	return slices.Compact(flags)
}

// jsonShape is the key paths of a JSON value with the type at each, sorted:
// "task.budgets.steps.used:number", "tasks[].id:string".
func jsonShape(t *testing.T, line string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("not one JSON value: %q: %v", line, err)
	}
	var paths []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 {
				paths = append(paths, prefix+":{}")
			}
			for k, e := range x {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, e)
			}
		case []any:
			if len(x) == 0 {
				paths = append(paths, prefix+":[]")
			}
			for _, e := range x {
				walk(prefix+"[]", e)
			}
		case string:
			paths = append(paths, prefix+":string")
		case float64:
			paths = append(paths, prefix+":number")
		case bool:
			paths = append(paths, prefix+":bool")
		default:
			paths = append(paths, prefix+":null")
		}
	}
	walk("", v)
	sort.Strings(paths)
	return strings.Join(slices.Compact(paths), " ")
}

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The command tree is read from the commands' own help, so every command,
// subcommand and flag the parser knows is offered.
func TestCompletionTreeMatchesTheParser(t *testing.T) {
	tree := commandTree(context.Background())
	var top []string
	for _, c := range tree {
		top = append(top, c.name)
	}
	for _, c := range commands() {
		if c.name != "completion" && !slices.Contains(top, c.name) {
			t.Errorf("command %q missing from the completion tree %v", c.name, top)
		}
	}
	find := func(specs []cmdSpec, name string) cmdSpec {
		t.Helper()
		for _, s := range specs {
			if s.name == name {
				return s
			}
		}
		t.Fatalf("%q not in %v", name, names(specs))
		return cmdSpec{}
	}
	task := find(tree, "task")
	for _, sub := range taskCommands() {
		s := find(task.subs, sub.name)
		if !slices.Contains(s.flags, "--json") {
			t.Errorf("task %s: flags %v lack --json", sub.name, s.flags)
		}
	}
	if create := find(task.subs, "create"); !slices.Contains(create.flags, "--goal") || !slices.Contains(create.flags, "--max-wall-seconds") {
		t.Errorf("task create flags: %v", create.flags)
	}
	if serve := find(tree, "serve"); !slices.Contains(serve.flags, "--config") {
		t.Errorf("serve flags: %v", serve.flags)
	}
}

// completeBash sources the bash script and completes words the way bash
// does at the cursor after the last word.
func completeBash(t *testing.T, script string, words ...string) []string {
	t.Helper()
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, "'"+w+"'")
	}
	prog := `source "$1"; COMP_WORDS=(` + strings.Join(quoted, " ") + `); COMP_CWORD=` +
		strconv.Itoa(len(words)-1) + `; _taskhost; printf '%s\n' "${COMPREPLY[@]}"`
	out, err := exec.Command("bash", "-c", prog, "bash", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash completion of %q: %v\n%s", words, err, out)
	}
	return strings.Fields(string(out))
}

func TestCompletionBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("bash is not installed: %v", err)
	}
	stdout, stderr, code := runCLI(t, "", "completion", "bash")
	if code != exitOK || stderr != "" {
		t.Fatalf("completion bash: exit %d, stderr %q", code, stderr)
	}
	script := filepath.Join(t.TempDir(), "taskhost.bash")
	if err := os.WriteFile(script, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		words []string
		want  []string
	}{
		{[]string{"taskhost", "ta"}, []string{"task"}},
		{[]string{"taskhost", "task", "cr"}, []string{"create"}},
		{[]string{"taskhost", "task", "create", "--go"}, []string{"--goal"}},
		{[]string{"taskhost", "task", "status", "t_1", "--js"}, []string{"--json"}},
		{[]string{"taskhost", "approvals", ""}, []string{"list"}},
		{[]string{"taskhost", "serve", "--con"}, []string{"--config"}},
		{[]string{"taskhost", "completion", "f"}, []string{"fish"}},
		{[]string{"taskhost", "executors", "re"}, []string{"reload"}},
		{[]string{"taskhost", "executors", "--mod"}, []string{"--model-preflight"}},
		{[]string{"taskhost", "inspect", "I"}, nil}, // ID is a placeholder, not a word
		{[]string{"taskhost", "nosuch", "--x"}, nil},
	}
	for _, tt := range tests {
		if got := completeBash(t, script, tt.words...); !slices.Equal(got, tt.want) {
			t.Errorf("complete %q = %q, want %q", tt.words, got, tt.want)
		}
	}
}

func TestCompletionShells(t *testing.T) {
	for _, shell := range []string{"zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			stdout, _, code := runCLI(t, "", "completion", shell)
			if code != exitOK || !strings.Contains(stdout, "taskhost") || !strings.Contains(stdout, "create") {
				t.Fatalf("completion %s: exit %d\n%s", shell, code, stdout)
			}
			if _, err := exec.LookPath(shell); err != nil {
				t.Skipf("%s is not installed, so the script's syntax is not checked: %v", shell, err)
			}
			script := filepath.Join(t.TempDir(), "taskhost."+shell)
			if err := os.WriteFile(script, []byte(stdout), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(shell, "-n", script).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", shell, err, out)
			}
		})
	}
	_, stderr, code := runCLI(t, "", "completion", "powershell")
	if code != exitUsage || !strings.Contains(stderr, `unknown shell "powershell": bash, zsh or fish`) {
		t.Errorf("completion powershell: exit %d, stderr %q", code, stderr)
	}
}

// The completion reads each command's FlagSet; its help prints the same
// FlagSet. Read back from the help, as a user sees it, each command's
// flags are exactly the ones completion offers.
func TestCompletionFlagsAreTheHelpsFlags(t *testing.T) {
	// The flag package prints -name; completion offers --name, and -n
	// for a one-letter flag, as the help's usage lines spell them.
	flagLine := regexp.MustCompile(`^  -{1,2}([a-z][a-z0-9-]*)(\s|=|$)`)
	helpFlags := func(path ...string) []string {
		t.Helper()
		stdout, stderr, _ := runCLI(t, "", append(path, "--help")...)
		var flags []string
		inFlags := false
		for _, line := range strings.Split(stdout+stderr, "\n") {
			if strings.HasSuffix(line, "Flags:") {
				inFlags = true
				continue
			}
			if m := flagLine.FindStringSubmatch(line); inFlags && m != nil {
				dash := "--"
				if len(m[1]) == 1 {
					dash = "-"
				}
				flags = append(flags, dash+m[1])
			}
		}
		slices.Sort(flags)
		return flags
	}
	checked := 0
	for _, c := range commandTree(context.Background()) {
		leaves := map[string][]string{c.name: c.flags}
		if len(c.subs) > 0 {
			leaves = map[string][]string{}
			for _, s := range c.subs {
				leaves[c.name+" "+s.name] = s.flags
			}
		}
		for path, flags := range leaves {
			if want := helpFlags(strings.Fields(path)...); !slices.Equal(flags, want) {
				t.Errorf("taskhost %s: completion offers %v, its help lists %v", path, flags, want)
			}
			checked++
		}
	}
	if checked < 25 {
		t.Fatalf("only %d commands checked", checked)
	}
}

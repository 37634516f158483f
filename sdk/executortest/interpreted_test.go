package executortest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Options.Interpreted: the script needs no exec bit, the interpreter must
// be an absolute executable, read-only paths absolute; and the config the
// kit writes pins both files.
func TestValidateInterpreted(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "x.py")
	if err := os.WriteFile(script, []byte("print()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		in      *Interpreted
		wantErr string // empty: valid
	}{
		{"none: the script must be executable", nil, "Options.Binary: " + script + " is not an executable file"},
		{"valid", &Interpreted{Interpreter: self, ReadOnly: []string{dir}}, ""},
		{"relative interpreter", &Interpreted{Interpreter: "python3"}, `Options.Interpreted.Interpreter = "python3": an absolute path`},
		{"interpreter not executable", &Interpreted{Interpreter: script}, "Options.Interpreted.Interpreter: " + script + " is not an executable file"},
		{"relative read-only path", &Interpreted{Interpreter: self, ReadOnly: []string{dir, "lib"}}, `Options.Interpreted.ReadOnly[1] = "lib": an absolute path`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Binary: script, Kind: "k", TaskhostBin: self, Interpreted: c.in,
				Spec: func(string) map[string]any { return map[string]any{} }}
			_, err := o.validate()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("validate: %v; want an error containing %q", err, c.wantErr)
			}
		})
	}

	k := &kit{opts: Options{Kind: "k", Interpreted: &Interpreted{Interpreter: self, Args: []string{"--a=b"}, ReadOnly: []string{dir}}}, sums: map[string]string{}}
	h := &host{k: k, config: filepath.Join(dir, "taskhost.toml")}
	if err := h.install(script); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(h.config)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := k.sha256(self)
	for _, want := range []string{`path = "` + script + `"`, `sha256 = "`, `interpreter = "` + self + `"`, `interpreter_sha256 = "` + sum + `"`, `args = ["--a=b"]`, `read_only = ["` + dir + `"]`} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("the config lacks %s:\n%s", want, cfg)
		}
	}
	if h.plugin != self {
		t.Errorf("the kit looks for plugins of argv[0] %q, want the interpreter %q", h.plugin, self)
	}
}

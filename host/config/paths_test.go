package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every relative path of a config file resolves against the file's
// directory, whatever the working directory; the pinned interpreter's path
// must be absolute, and says so.
func TestRelativePathsResolveAgainstTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taskhost.toml")
	text := `[model]
script = "scripts/model.json"

[executors.x]
path = "bin/taskhost-executor-x"
read_write = ["work", "/abs/elsewhere", "../shared"]
read_only = ["lib", "/usr/share/x"]
`
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// A working directory elsewhere must not matter.
	t.Chdir(t.TempDir())
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ex := cfg.Executors["x"]
	for _, c := range []struct{ key, got, want string }{
		{"model.script", cfg.Model.Script, filepath.Join(dir, "scripts/model.json")},
		{"executors.x.path", ex.Path, filepath.Join(dir, "bin/taskhost-executor-x")},
		{"executors.x.read_write[0]", ex.ReadWrite[0], filepath.Join(dir, "work")},
		{"executors.x.read_write[1]", ex.ReadWrite[1], "/abs/elsewhere"},
		{"executors.x.read_write[2]", ex.ReadWrite[2], filepath.Join(filepath.Dir(dir), "shared")},
		{"executors.x.read_only[0]", ex.ReadOnly[0], filepath.Join(dir, "lib")},
		{"executors.x.read_only[1]", ex.ReadOnly[1], "/usr/share/x"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.key, c.got, c.want)
		}
	}

	// Without a file to resolve against, a relative read_write is refused
	// by name.
	cfg = Default()
	cfg.Executors["x"] = Executor{Path: "/bin/x", ReadWrite: []string{"work"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "executors.x.read_write[0]") {
		t.Errorf("a relative read_write in a config without a file: %v, want an error naming the key", err)
	}

	if err := os.WriteFile(path, []byte("[machine_spirit]\nswipl_path = \"bin/swipl\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "machine_spirit.swipl_path") {
		t.Errorf("a relative swipl_path: %v, want an error naming the key", err)
	}
}

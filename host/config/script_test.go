package config_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/model"
)

// TestModelScriptResolvesAgainstTheConfigFile loads a config whose
// [model] script is relative from another working directory, where a file
// of the same name says something else: the provider answers from the
// script beside the config file.
func TestModelScriptResolvesAgainstTheConfigFile(t *testing.T) {
	confDir, cwd := t.TempDir(), t.TempDir()
	script := func(reply string) []byte {
		return []byte(`{"version": 1, "rules": [{"name": "only", "when": {}, "reply": {"content": "` + reply + `"}}]}`)
	}
	for dir, reply := range map[string]string{confDir: "beside the config", cwd: "from the working directory"} {
		if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "scripts", "s.json"), script(reply), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(confDir, "taskhost.toml")
	if err := os.WriteFile(cfgPath, []byte("[model]\nscript = \"scripts/s.json\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)

	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(confDir, "scripts", "s.json"); cfg.Model.Script != want {
		t.Fatalf("model.script = %q, want %q", cfg.Model.Script, want)
	}
	p, err := model.New(cfg.Model, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: "user", Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "beside the config" {
		t.Errorf("the provider answered %q, want the script beside the config", resp.Message.Content)
	}
}

// TestModelScriptPaths: an absolute script is kept (cleaned), an empty one
// means the embedded default, and a relative one without a config file's
// directory is refused naming the key.
func TestModelScriptPaths(t *testing.T) {
	cfg, err := config.Parse([]byte("[model]\nscript = \"/etc/taskhost/../taskhost/s.json\"\n"), "")
	if err != nil || cfg.Model.Script != "/etc/taskhost/s.json" {
		t.Errorf("absolute script: %q, %v", cfg.Model.Script, err)
	}
	cfg, err = config.Parse([]byte("[model]\nscript = \"\"\n"), "/etc/taskhost")
	if err != nil || cfg.Model.Script != "" {
		t.Errorf("empty script: %q, %v", cfg.Model.Script, err)
	}
	_, err = config.Parse([]byte("[model]\nscript = \"s.json\"\n"), "")
	if err == nil || !strings.Contains(err.Error(), "model.script") || !strings.Contains(err.Error(), "relative path") {
		t.Errorf("relative script without a base dir: %v", err)
	}
}

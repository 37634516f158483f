package config

import (
	"maps"
	"net/url"
	"path/filepath"
	"slices"
)

// Model providers.
const (
	ProviderScripted = "scripted"
	ProviderOpenAI   = "openai"
)

// Model is the [model] section: the provider behind every model call an
// executor makes through the host.
type Model struct {
	Provider string `toml:"provider"` // "scripted" (default) or "openai"

	// Script is the scripted provider's script file; empty means the
	// embedded default script. A relative path is resolved against the
	// config file's directory, as [executors] paths are.
	Script string `toml:"script"`

	// The openai provider: an OpenAI-compatible chat-completions endpoint.
	BaseURL string `toml:"base_url"` // e.g. "http://127.0.0.1:11434/v1"
	Name    string `toml:"model"`    // the model name sent in requests
	// APIKeyEnv names the environment variable holding the API key. The key
	// itself never appears in the config.
	APIKeyEnv string `toml:"api_key_env"`
	// APIKey exists only to refuse a literal key with a clear message.
	APIKey         string `toml:"api_key"`
	TimeoutSeconds int    `toml:"timeout_seconds"` // 1..600, default 60
	MaxRetries     int    `toml:"max_retries"`     // 0..10, default 3 (on 429 and 5xx)
	// Preflight sends one cheap request (openai: GET {base_url}/models) when
	// the daemon starts and whenever `taskhost executors --model-preflight`
	// asks, so a bad key or a dead endpoint shows before a task fails on it.
	Preflight bool `toml:"preflight"`
}

// resolveModelScript makes a relative model.script absolute by joining it to
// baseDir, the config file's directory, so that the daemon finds the same
// file whatever directory it was started in.
func resolveModelScript(cfg *Config, baseDir string, probs *problems) {
	script := cfg.Model.Script
	switch {
	case script == "":
	case filepath.IsAbs(script):
		cfg.Model.Script = filepath.Clean(script)
	case baseDir == "":
		probs.add("model.script", "model.script = %s: a relative path needs the config file's directory to resolve against; use an absolute path", quote(script))
	default:
		cfg.Model.Script = filepath.Join(baseDir, script)
	}
}

func defaultModel() Model {
	return Model{Provider: ProviderScripted, TimeoutSeconds: 60, MaxRetries: 3}
}

func (m Model) validate(ps *problems) {
	ps.intRange("model.timeout_seconds", m.TimeoutSeconds, 1, 600)
	ps.intRange("model.max_retries", m.MaxRetries, 0, 10)
	if m.APIKey != "" {
		ps.add("model.api_key", "model.api_key: a literal API key is refused in the config; put the key in an environment variable and name that variable in model.api_key_env")
	}
	if m.APIKeyEnv != "" && !envNameRE.MatchString(m.APIKeyEnv) {
		ps.add("model.api_key_env", "model.api_key_env = %s: must be the name of an environment variable (letters, digits, '_'), not the key itself", quote(m.APIKeyEnv))
	}
	switch m.Provider {
	case ProviderScripted:
	case ProviderOpenAI:
		if u, err := url.Parse(m.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			ps.add("model.base_url", "model.base_url = %s: the openai provider needs an http(s) URL, e.g. \"http://127.0.0.1:11434/v1\"", quote(m.BaseURL))
		}
		if m.Name == "" {
			ps.add("model.model", "model.model is missing: the openai provider needs a model name")
		}
	default:
		ps.add("model.provider", "model.provider = %s: must be %q or %q", quote(m.Provider), ProviderScripted, ProviderOpenAI)
	}
}

// Tool approval policies.
const (
	ApprovalNever  = "never"
	ApprovalAlways = "always"
)

// Tool is one [tools."NAME"] section: the policy of a built-in tool.
type Tool struct {
	Enabled        bool   `toml:"enabled"`
	Approval       string `toml:"approval"`        // "never" or "always"
	TimeoutSeconds int    `toml:"timeout_seconds"` // 1..3600
	// Network lets shell.run commands reach the network; by default each
	// runs in a network namespace of its own with only loopback (or,
	// under a daemon that is not root, with no sockets but unix ones).
	// shell.run only.
	Network bool `toml:"network"`
	// The rlimits of each shell.run command's processes (shell.run only;
	// 0 elsewhere). Under a root daemon each command has a uid of its own,
	// so max_processes bounds the command as a whole.
	MaxProcesses  int `toml:"max_processes"`   // RLIMIT_NPROC, 16..65536, default 256
	MaxMemoryMB   int `toml:"max_memory_mb"`   // RLIMIT_AS per process, 64..1048576, default 4096
	MaxCPUSeconds int `toml:"max_cpu_seconds"` // RLIMIT_CPU per process, 1..86400, default 300
	MaxFileMB     int `toml:"max_file_mb"`     // RLIMIT_FSIZE, 1..65536, default 256
	// The cgroup limits of each shell.run command as a whole (shell.run
	// only; 0 elsewhere), where the daemon has cgroup controllers (see
	// docs/security.md); max_processes is also its pids limit. The
	// memory counts what the command writes to its workspace too (it is
	// held in memory until the command ends), so it is at least twice the
	// 64 MiB workspace limit.
	CommandMemoryMB   int `toml:"command_memory_mb"`   // memory limit, 128..1048576, default 1024
	CommandCPUPercent int `toml:"command_cpu_percent"` // CPU bandwidth, % of one CPU, 1..6400, default 100
}

// BuiltinTools are the tools the host ships, with their default policies.
func defaultTools() map[string]Tool {
	return map[string]Tool{
		"workspace.read":  {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"workspace.write": {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"workspace.list":  {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"shell.run": {Enabled: true, Approval: ApprovalAlways, TimeoutSeconds: 60,
			MaxProcesses: 256, MaxMemoryMB: 4096, MaxCPUSeconds: 300, MaxFileMB: 256,
			CommandMemoryMB: 1024, CommandCPUPercent: 100},
		"time.sleep": {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 60},
	}
}

func validateTools(tools map[string]Tool, ps *problems) {
	known := defaultTools()
	for _, name := range slices.Sorted(maps.Keys(tools)) {
		t := tools[name]
		key := `tools."` + name + `"`
		if _, ok := known[name]; !ok {
			ps.add(key, "%s: unknown tool; the built-in tools are %v", key, slices.Sorted(maps.Keys(known)))
			continue
		}
		if t.Approval != ApprovalNever && t.Approval != ApprovalAlways {
			ps.add(key+".approval", "%s.approval = %s: must be %q or %q", key, quote(t.Approval), ApprovalNever, ApprovalAlways)
		}
		ps.intRange(key+".timeout_seconds", t.TimeoutSeconds, 1, 3600)
		if name != "shell.run" {
			if t.Network {
				ps.add(key+".network", "%s.network = true: only shell.run runs commands that could use a network", key)
			}
			if t.MaxProcesses != 0 || t.MaxMemoryMB != 0 || t.MaxCPUSeconds != 0 || t.MaxFileMB != 0 || t.CommandMemoryMB != 0 || t.CommandCPUPercent != 0 {
				ps.add(key, "%s: max_processes, max_memory_mb, max_cpu_seconds, max_file_mb, command_memory_mb and command_cpu_percent bound shell.run's commands only", key)
			}
			continue
		}
		ps.intRange(key+".max_processes", t.MaxProcesses, 16, 65536)
		ps.intRange(key+".max_memory_mb", t.MaxMemoryMB, 64, 1<<20)
		ps.intRange(key+".max_cpu_seconds", t.MaxCPUSeconds, 1, 86400)
		ps.intRange(key+".max_file_mb", t.MaxFileMB, 1, 65536)
		ps.intRange(key+".command_memory_mb", t.CommandMemoryMB, 128, 1<<20)
		ps.intRange(key+".command_cpu_percent", t.CommandCPUPercent, 1, 6400)
	}
}

// Approvals is the [approvals] section.
type Approvals struct {
	// TimeoutSeconds is how long a pending approval waits before it
	// expires and its task fails (approval_timeout): 1..604800, default 3600.
	TimeoutSeconds int `toml:"timeout_seconds"`
}

func (a Approvals) validate(ps *problems) {
	ps.intRange("approvals.timeout_seconds", a.TimeoutSeconds, 1, 7*24*3600)
}

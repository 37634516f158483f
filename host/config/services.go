package config

import (
	"encoding/json"
	"fmt"
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

	// What every request asks of the model (openai). A task's spec may
	// lower max_tokens and set the sampling options for itself
	// (docs/model.md).
	//
	// MaxTokens is sent as "max_tokens": without it llama.cpp and Ollama
	// generate until the context is full. 0 leaves it out (a server that
	// refuses the field).
	MaxTokens int `toml:"max_tokens"` // 0 or 16..MaxModelOutputTokens, default 1024
	// ContextTokens is the server's context size, when known: the legacy
	// executor keeps each request within it, less max_tokens, by cutting
	// the oldest tool results first. 0: unknown, nothing is cut.
	ContextTokens int      `toml:"context_tokens"` // 0 or 512..MaxModelContextTokens
	Temperature   *float64 `toml:"temperature"`    // 0..2; absent: the server's default
	TopP          *float64 `toml:"top_p"`          // (0, 1]; absent: the server's default
	Seed          *int     `toml:"seed"`           // 0..2^31-1; absent: none sent
	Stop          []string `toml:"stop"`           // at most MaxModelStops, each 1..MaxModelStopBytes bytes
	// ExtraBody is a JSON object merged into every request body, for a
	// server's own options (Ollama's {"options": {"num_ctx": 8192}}). It
	// may not set a field the provider sets itself.
	ExtraBody string `toml:"extra_body"` // at most MaxModelExtraBodyBytes
	// Stream asks for the reply as server-sent events: the host then sees
	// the call progress (a step.progress event at most every second) and
	// timeout_seconds bounds the wait for each chunk.
	Stream bool `toml:"stream"`
	// MaxCallSeconds bounds one model request as a whole, however steadily
	// a stream delivers; timeout_seconds bounds each wait for the server.
	MaxCallSeconds int `toml:"max_call_seconds"` // 1..3600, default 600
}

// Bounds of the [model] request options, here so the host's per-task
// overrides check the same ranges.
const (
	MaxModelOutputTokens   = 1 << 20
	MinModelOutputTokens   = 16
	MinModelContextTokens  = 512
	MaxModelContextTokens  = 1 << 24
	MaxModelStops          = 4
	MaxModelStopBytes      = 64
	MaxModelExtraBodyBytes = 4096
	MaxModelSeed           = 1<<31 - 1
)

// ReservedBodyFields are the request fields the provider sets itself;
// extra_body may not set them.
var ReservedBodyFields = []string{"model", "messages", "tools", "tool_choice", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "n"}

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
	return Model{Provider: ProviderScripted, TimeoutSeconds: 60, MaxRetries: 3, MaxTokens: 1024, Stop: []string{}, Stream: true, MaxCallSeconds: 600}
}

func (m Model) validate(ps *problems) {
	ps.intRange("model.timeout_seconds", m.TimeoutSeconds, 1, 600)
	ps.intRange("model.max_retries", m.MaxRetries, 0, 10)
	ps.intRange("model.max_call_seconds", m.MaxCallSeconds, 1, 3600)
	if m.MaxTokens != 0 {
		ps.intRange("model.max_tokens", m.MaxTokens, MinModelOutputTokens, MaxModelOutputTokens)
	}
	if m.ContextTokens != 0 {
		ps.intRange("model.context_tokens", m.ContextTokens, MinModelContextTokens, MaxModelContextTokens)
		if m.ContextTokens >= MinModelContextTokens && m.MaxTokens >= m.ContextTokens {
			ps.add("model.max_tokens", "model.max_tokens = %d: must be less than model.context_tokens (%d), which holds the prompt and the reply", m.MaxTokens, m.ContextTokens)
		}
	}
	for _, p := range CheckSampling(m.Temperature, m.TopP, m.Seed, m.Stop) {
		ps.add("model."+p.Key, "model.%s", p.Message)
	}
	if msg := CheckExtraBody(m.ExtraBody); msg != "" {
		ps.add("model.extra_body", "model.extra_body: %s", msg)
	}
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
		// The task tools act on the calling task's own subtree only.
		"task.delegate": {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"task.create":   {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"task.list":     {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"task.status":   {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"task.cancel":   {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"task.pause":    {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
		"task.resume":   {Enabled: true, Approval: ApprovalNever, TimeoutSeconds: 10},
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

// CheckSampling checks the sampling options wherever they are set (the
// [model] section or a task's spec): each problem names its key (without
// a section) and says the value and the range.
func CheckSampling(temperature, topP *float64, seed *int, stop []string) []Problem {
	var ps []Problem
	bad := func(key, format string, args ...any) {
		ps = append(ps, Problem{Key: key, Message: key + " " + fmt.Sprintf(format, args...)})
	}
	if t := temperature; t != nil && !(*t >= 0 && *t <= 2) {
		bad("temperature", "= %g: must be between 0 and 2", *t)
	}
	if p := topP; p != nil && !(*p > 0 && *p <= 1) {
		bad("top_p", "= %g: must be above 0 and at most 1", *p)
	}
	if s := seed; s != nil && (*s < 0 || *s > MaxModelSeed) {
		bad("seed", "= %d: must be between 0 and %d", *s, MaxModelSeed)
	}
	if len(stop) > MaxModelStops {
		bad("stop", "has %d entries: at most %d", len(stop), MaxModelStops)
	}
	for i, s := range stop {
		if s == "" || len(s) > MaxModelStopBytes {
			bad("stop", "[%d] is %d bytes: must be 1..%d", i, len(s), MaxModelStopBytes)
		}
	}
	return ps
}

// CheckExtraBody returns what is wrong with an extra_body value, "" when
// nothing is.
func CheckExtraBody(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > MaxModelExtraBodyBytes {
		return fmt.Sprintf("is %d bytes: at most %d", len(s), MaxModelExtraBodyBytes)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return `must be a JSON object, e.g. '{"options": {"num_ctx": 8192}}'`
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if slices.Contains(ReservedBodyFields, k) {
			return fmt.Sprintf("sets %q, which the provider sets itself (use the [model] key of that name)", k)
		}
	}
	return ""
}

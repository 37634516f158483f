// Package config loads and validates the taskhost daemon's TOML configuration
// (DESIGN.md §3, §8, §9).
//
// The format is strict: an unknown key, a value of the wrong type or a value
// outside its range is an error that names the key. All problems of a file are
// reported together as an [*Error], so a user fixes them in one pass:
//
//	cfg, err := config.Load("/etc/taskhost/taskhost.toml")
//	var cerr *config.Error
//	if errors.As(err, &cerr) {
//		for _, p := range cerr.Problems {
//			log.Printf("%s: %s", p.Key, p.Message)
//		}
//	}
//
// Every key is optional; a missing key keeps its value from [Default]. An empty
// file therefore yields Default(). See testdata/example.toml for every key with
// its default.
//
// Adding a section: give Config a field of a new struct type with a `toml` tag,
// tag each of its fields, write a validate method for it and call that from
// [Config.Validate]. The strict decoder discovers the keys from the tags, so
// unknown-key and type checks need no further changes.
package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/taskhost/taskhost/internal/uids"
)

// MaxFileBytes is the largest configuration file accepted (1 MiB). A real
// taskhost configuration is a few KiB.
const MaxFileBytes = 1 << 20

// MaxRetentionDays bounds tasks.retention_days (ten years).
const MaxRetentionDays = 3650

// MaxConcurrentCap bounds tasks.max_concurrent: what one host was measured
// to hold with every task's step waiting on a slow model (docs/operations.md,
// "Concurrency"), each task a plugin process of its own.
const MaxConcurrentCap = 1000

// MaxPrestart bounds tasks.prestart and every kind's own prestart: the
// plugin processes of one kind kept started ahead of need (host/plugin's
// MaxPrestart).
const MaxPrestart = 16

// The most tasks.max_model_tokens_cap and tasks.max_output_bytes_cap may
// be: far above any task, below any sum's overflow.
const (
	MaxModelTokensCap = 10_000_000_000
	MaxOutputBytesCap = 1 << 40
)

// MaxParallelModelCalls bounds tasks.max_parallel_model_calls (and
// machinespirit's own): a step's model calls in flight at once.
const MaxParallelModelCalls = 16

// Built-in executor names. They are always known to the host and cannot be
// redefined under [executors].
const (
	ExecutorLegacy        = "legacy"
	ExecutorMachineSpirit = "machinespirit"
)

// Config is the whole taskhost configuration.
type Config struct {
	Tasks         Tasks               `toml:"tasks"`
	MachineSpirit MachineSpirit       `toml:"machine_spirit"`
	Executors     map[string]Executor `toml:"executors"` // [executors.NAME]; names match ^[a-z][a-z0-9_-]{0,31}$
	Limits        Limits              `toml:"limits"`
	Model         Model               `toml:"model"`
	Tools         map[string]Tool     `toml:"tools"` // [tools."NAME"]: built-in tools only
	Approvals     Approvals           `toml:"approvals"`
	Principals    Principals          `toml:"principals"` // [principals] "UID" = "NAME"
	API           API                 `toml:"api"`
	Confinement   Confinement         `toml:"confinement"`
	Store         Store               `toml:"store"`
	Fleet         Fleet               `toml:"fleet"`
}

// Tasks is the [tasks] section: whether tasks run at all, the default
// executor, concurrency and the budgets of DESIGN.md §3.
//
// Each budget has a default (applied to a new task that asks for nothing) and
// a cap (the most a task may ask for). The default must not exceed the cap.
type Tasks struct {
	Enabled       bool   `toml:"enabled"`        // default true
	Executor      string `toml:"executor"`       // default "legacy"; "legacy", "machinespirit" (if enabled) or a key of [executors]
	MaxConcurrent int    `toml:"max_concurrent"` // 1..MaxConcurrentCap, default 2; beyond it a create or resume is queued
	// MaxQueued bounds the pending tasks waiting for a slot, FIFO: 1..1024,
	// default 32; beyond it a create or resume is refused (QUEUE_FULL).
	MaxQueued int `toml:"max_queued"`
	// MaxSubagents bounds the tasks delegated under one root task over
	// its life (task.delegate): 1..64, default 8 (Zara's max_subagents).
	MaxSubagents int `toml:"max_subagents"`
	// MaxTreeDepth bounds how many levels of children a root may have:
	// 1..8, default 2 (Zara's max_depth; [tasks] max_depth is the depth
	// budget of a task's recursive model calls).
	MaxTreeDepth int `toml:"max_tree_depth"`
	// MaxRunningPerPrincipal bounds one principal's pending, running and
	// waiting tasks: 0..MaxConcurrent, default 0 (no bound of its own).
	MaxRunningPerPrincipal int `toml:"max_running_per_principal"`

	MaxSteps    int `toml:"max_steps"`     // 1..MaxStepsCap, default 20
	MaxStepsCap int `toml:"max_steps_cap"` // 1..100000, default 200

	MaxToolCalls    int `toml:"max_tool_calls"`     // 0..MaxToolCallsCap, default 50
	MaxToolCallsCap int `toml:"max_tool_calls_cap"` // 0..100000, default 1000

	MaxModelCalls    int `toml:"max_model_calls"`     // 0..MaxModelCallsCap, default 100
	MaxModelCallsCap int `toml:"max_model_calls_cap"` // 0..100000, default 2000

	MaxDepth    int `toml:"max_depth"`     // 0..MaxDepthCap, default 1
	MaxDepthCap int `toml:"max_depth_cap"` // 0..16, default 4

	MaxWallSeconds    int `toml:"max_wall_seconds"`     // 1..MaxWallSecondsCap, default 1800
	MaxWallSecondsCap int `toml:"max_wall_seconds_cap"` // 1..604800 (7 days), default 86400

	// MaxModelTokens bounds a task's model tokens: prompt + completion
	// of every answered call, as the provider reports them (estimated at
	// 4 bytes a token when it does not).
	MaxModelTokens    int `toml:"max_model_tokens"`     // 0..MaxModelTokensCap, default 1000000
	MaxModelTokensCap int `toml:"max_model_tokens_cap"` // 0..10000000000, default 100000000

	// MaxOutputBytes bounds the bytes a task's effects hand back to its
	// executor: model replies (content and tool-call arguments) and tool
	// outputs.
	MaxOutputBytes    int `toml:"max_output_bytes"`     // 0..MaxOutputBytesCap, default 67108864 (64 MiB)
	MaxOutputBytesCap int `toml:"max_output_bytes_cap"` // 0..1099511627776 (1 TiB), default 1073741824 (1 GiB)

	CheckpointMaxBytes int `toml:"checkpoint_max_bytes"` // 1024..3145728, default 262144

	// MaxParallelModelCalls bounds the model calls one step has in flight
	// at once, for every executor: the host serves at most this many of a
	// step's model calls together and queues the others (1..16, default 4).
	MaxParallelModelCalls int `toml:"max_parallel_model_calls"`

	// Prestart is how many plugin processes of each executor kind are
	// kept started ahead of need, each for one task: 0..MaxPrestart,
	// default 2; 0 starts every task's own at its start. [executors.NAME]
	// and [machine_spirit] prestart override it per kind.
	Prestart int `toml:"prestart"`

	// RetentionDays: the daemon deletes tasks that finished (completed,
	// failed, cancelled) more than this many days ago, with their
	// workspaces. 0..3650, default 0: keep every task.
	RetentionDays int `toml:"retention_days"`
}

// MachineSpirit is the [machine_spirit] section: the opt-in MACHINE-SPIRIT
// executor and its pinned SWI-Prolog runtime.
type MachineSpirit struct {
	Enabled      bool   `toml:"enabled"`       // default false
	SwiplPath    string `toml:"swipl_path"`    // absolute; default "/usr/bin/swipl"
	SwiplVersion string `toml:"swipl_version"` // exact pinned version, ^\d+\.\d+\.\d+$; default "9.0.4"
	// The Prolog worker's limits (one worker per running task).
	WorkerMemoryMB   int `toml:"worker_memory_mb"`   // RLIMIT_AS, 256..65536, default 1024
	WorkerCPUSeconds int `toml:"worker_cpu_seconds"` // RLIMIT_CPU, 1..86400, default 3600
	// RLMGoalMode registers the rlm_goals graph, whose root model writes
	// Prolog goals run behind an allow-list; default false (the rlm graph
	// reads typed JSON plans and runs no model text).
	RLMGoalMode bool `toml:"rlm_goal_mode"`
	// MaxParallelModelCalls is the plugin's own bound on a step's model
	// calls in flight at once (a plan's map with parallel > 1): nil takes
	// tasks.max_parallel_model_calls, the host's bound, and a value may
	// only be lower (1..that). See [Config.MachineSpiritParallel].
	MaxParallelModelCalls *int `toml:"max_parallel_model_calls"`
	// Prestart overrides tasks.prestart for machinespirit (each pooled
	// process has its Prolog worker started): 0..MaxPrestart.
	Prestart *int `toml:"prestart"`
	// HandlerModules are operator Prolog handler modules by name
	// ([machine_spirit.handler_modules.NAME]), at most MaxHandlerModules,
	// each pinned by its SHA-256; the plugin reads, hashes and loads each
	// once, in name order (plugins/machinespirit).
	HandlerModules map[string]HandlerModule `toml:"handler_modules"`
	// GraphsDir holds operator graphs, one NAME.pl each (absolute, or
	// relative to the config file; Parse makes it absolute); only the
	// graphs GraphPins names are loaded.
	GraphsDir string `toml:"graphs_dir"`
	// GraphPins are the operator graphs to load, by graph id
	// ([machine_spirit.graph_pins] NAME = "SHA-256"), at most
	// MaxOperatorGraphs; the plugin reads, hashes and compiles each.
	GraphPins map[string]string `toml:"graph_pins"`
}

// MaxOperatorGraphs bounds [machine_spirit.graph_pins].
const MaxOperatorGraphs = 16

// MaxHandlerModules bounds [machine_spirit] handler_modules.
const MaxHandlerModules = 16

// HandlerModule is one [machine_spirit.handler_modules.NAME] section.
type HandlerModule struct {
	// Path may be relative to the config file's directory; Parse makes it
	// absolute.
	Path   string `toml:"path"`
	SHA256 string `toml:"sha256"` // required: 64 lowercase hex
}

// Executor is one [executors.NAME] section: a third-party executor plugin.
type Executor struct {
	// Path is the plugin binary. In the file it may be relative to the
	// config file's directory; Parse and Load make it absolute.
	Path string `toml:"path"`
	// SHA256 optionally pins the binary: 64 lowercase hex characters, as
	// printed by sha256sum. Empty means not pinned.
	SHA256 string `toml:"sha256"`
	// Args are passed to the plugin binary: at most 16, each at most 256 bytes.
	Args []string `toml:"args"`
	// Interpreter, when set, makes Path a script that this binary runs
	// (e.g. /usr/bin/python3): the host execs the interpreter from the fd
	// it hashed, with a sealed copy of the script's hashed bytes as its
	// first argument; SHA256 then pins the script. Absolute, or relative
	// to the config file's directory.
	Interpreter string `toml:"interpreter"`
	// InterpreterSHA256 pins the interpreter (the file it resolves to), as
	// SHA256 pins the script: required when SHA256 is set.
	InterpreterSHA256 string `toml:"interpreter_sha256"`
	// Rlimits of each plugin process; 0 (or absent) takes [confinement]'s.
	MaxAddressSpaceMB int `toml:"max_address_space_mb"` // 64..1048576
	MaxOpenFiles      int `toml:"max_open_files"`       // 64..65536
	MaxProcesses      int `toml:"max_processes"`        // 16..65536; also its cgroup's pids.max
	// The cgroup limits of each plugin process with everything it starts;
	// 0 (or absent) takes [confinement]'s.
	MemoryMB   int `toml:"memory_mb"`   // 64..1048576
	CPUPercent int `toml:"cpu_percent"` // 1..6400 (% of one CPU)
	// DiskMB bounds the plugin's run dir (a tmpfs); 0 takes [confinement]'s.
	DiskMB int `toml:"disk_mb"` // 16..1048576
	// User, when set, runs the plugin as this local user (by name).
	User string `toml:"user"`
	// ReadWrite are absolute paths the plugin may read and write besides its
	// private dir: at most 8.
	ReadWrite []string `toml:"read_write"`
	// ReadOnly are absolute paths the plugin may read (and, for a
	// directory, list and execute from) besides the system's: at most 8.
	// An interpreter's libraries live here, say.
	ReadOnly []string `toml:"read_only"`
	// Subprocesses lets the plugin fork and exec; by default seccomp
	// refuses both.
	Subprocesses bool `toml:"subprocesses"`
	// Prestart overrides tasks.prestart for this executor: 0..MaxPrestart.
	Prestart *int `toml:"prestart"`
}

// Limits is the [limits] section: the bounds of DESIGN.md §9.
type Limits struct {
	GoalChars              int `toml:"goal_chars"`                // 1..20000, default 2000
	SummaryChars           int `toml:"summary_chars"`             // 100..20000, default 2000
	RecentSummaries        int `toml:"recent_summaries"`          // 0..50, default 5 (sent to the executor)
	ResultBytes            int `toml:"result_bytes"`              // 1024..1048576, default 65536
	EventBytes             int `toml:"event_bytes"`               // 256..4096, default 1024
	EventsPerTask          int `toml:"events_per_task"`           // 10..100000, default 500
	PluginStartSeconds     int `toml:"plugin_start_seconds"`      // 1..120, default 10
	PluginStopGraceSeconds int `toml:"plugin_stop_grace_seconds"` // 1..60, default 2
	GRPCMessageBytes       int `toml:"grpc_message_bytes"`        // 1048576..16777216, default 4194304
}

// Default returns the configuration used when a key is absent. It is valid.
// Every call returns a fresh value, so callers may modify it.
func Default() Config {
	return Config{
		Tasks: Tasks{
			Enabled:            true,
			Executor:           ExecutorLegacy,
			MaxConcurrent:      2,
			MaxQueued:          32,
			MaxSubagents:       8,
			MaxTreeDepth:       2,
			MaxSteps:           20,
			MaxStepsCap:        200,
			MaxToolCalls:       50,
			MaxToolCallsCap:    1000,
			MaxModelCalls:      100,
			MaxModelCallsCap:   2000,
			MaxModelTokens:     1_000_000,
			MaxModelTokensCap:  100_000_000,
			MaxOutputBytes:     64 << 20,
			MaxOutputBytesCap:  1 << 30,
			MaxDepth:           1,
			MaxDepthCap:        4,
			MaxWallSeconds:     1800,
			MaxWallSecondsCap:  86400,
			CheckpointMaxBytes: 256 << 10,
			Prestart:           2,

			MaxParallelModelCalls: 4,
		},
		MachineSpirit: MachineSpirit{
			Enabled:      false,
			SwiplPath:    "/usr/bin/swipl",
			SwiplVersion: "9.0.4",

			WorkerMemoryMB:   1024,
			WorkerCPUSeconds: 3600,
		},
		Executors: map[string]Executor{},
		Limits: Limits{
			GoalChars:              2000,
			SummaryChars:           2000,
			RecentSummaries:        5,
			ResultBytes:            64 << 10,
			EventBytes:             1 << 10,
			EventsPerTask:          500,
			PluginStartSeconds:     10,
			PluginStopGraceSeconds: 2,
			GRPCMessageBytes:       4 << 20,
		},
		Confinement: Confinement{
			Required:          true,
			MaxAddressSpaceMB: 4096,
			MaxOpenFiles:      1024,
			MaxProcesses:      4096,
			MemoryMB:          2048,
			CPUPercent:        100,
			DiskMB:            1024,
			UIDFirst:          uids.DefaultFirst,
			UIDCount:          uids.DefaultCount,
		},
		Model:      defaultModel(),
		Store:      defaultStore(),
		Tools:      defaultTools(),
		Approvals:  Approvals{TimeoutSeconds: 3600},
		Fleet:      defaultFleet(),
		Principals: Principals{},
		API:        API{Admins: []string{}, Tokens: map[string]string{}, MaxConnections: 64, FirstRequestTimeoutSeconds: 5, MaxWatchesPerPrincipal: 32},
	}
}

// Load reads the configuration file at path and parses it with [Parse],
// resolving relative executor paths against the file's directory.
//
// A file that cannot be read gives an error naming the path (wrapping the
// underlying error, so errors.Is(err, fs.ErrNotExist) works). An invalid file
// gives an [*Error] whose Path is set, so its message names the file too.
func Load(path string) (Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	f, err := os.Open(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Config{}, fmt.Errorf("config: %w (check the path, or create the file: an empty file means all defaults)", err)
		}
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()

	// Read one byte past the limit so Parse can tell "at" from "past".
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("config: read %s: %w", path, err)
	}
	cfg, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		var cerr *Error
		if errors.As(err, &cerr) {
			cerr.Path = path
		}
		return Config{}, err
	}
	return cfg, nil
}

// Parse parses and validates a TOML configuration. Absent keys keep their
// [Default] values. baseDir is the directory relative executor paths and a
// relative model.script are resolved against (the config file's directory);
// it should be absolute. If baseDir is empty, a relative one is an error.
//
// Every error returned is an [*Error] listing all the problems found.
func Parse(data []byte, baseDir string) (Config, error) {
	if len(data) > MaxFileBytes {
		return Config{}, &Error{Problems: []Problem{{
			Message: fmt.Sprintf("the config is larger than the %d-byte (1 MiB) limit; a taskhost config is a few KiB, so check that this is the right file", MaxFileBytes),
		}}}
	}

	cfg := Default()
	decodeProblems, ok := decode(data, &cfg)
	if !ok { // not TOML: nothing was decoded, so nothing more to check
		return Config{}, &Error{Problems: decodeProblems}
	}
	resolveExecutorPaths(&cfg, baseDir, &decodeProblems)
	resolveModelScript(&cfg, baseDir, &decodeProblems)
	resolveHandlerModules(&cfg, baseDir, &decodeProblems)

	all := slices.Clone(decodeProblems)
	failed := decodeProblems.keySet()
	for _, p := range cfg.validate() {
		// A key that failed to decode keeps its default or zero value; a
		// second complaint about it would only be noise.
		if !failed.covers(p.Key) {
			all = append(all, p)
		}
	}
	if len(all) > 0 {
		return Config{}, &Error{Problems: all}
	}
	return cfg, nil
}

// resolveAll is paths with each relative one joined to baseDir (a copy;
// paths itself may be shared with the caller's config).
func resolveAll(baseDir string, paths []string) []string {
	if len(paths) == 0 {
		return paths
	}
	out := slices.Clone(paths)
	for i, p := range out {
		if p != "" && !filepath.IsAbs(p) {
			out[i] = filepath.Join(baseDir, p)
		}
	}
	return out
}

// resolveHandlerModules makes relative handler module paths absolute.
func resolveHandlerModules(cfg *Config, baseDir string, probs *problems) {
	mods := maps.Clone(cfg.MachineSpirit.HandlerModules)
	for name, m := range mods {
		switch key := handlerModuleKey(name, "path"); {
		case m.Path == "":
		case filepath.IsAbs(m.Path):
			m.Path = filepath.Clean(m.Path)
		case baseDir == "":
			probs.add(key, "%s = %s: a relative path needs the config file's directory to resolve against; use an absolute path", key, quote(m.Path))
		default:
			m.Path = filepath.Join(baseDir, m.Path)
		}
		mods[name] = m
	}
	cfg.MachineSpirit.HandlerModules = mods
	switch d := cfg.MachineSpirit.GraphsDir; {
	case d == "":
	case filepath.IsAbs(d):
		cfg.MachineSpirit.GraphsDir = filepath.Clean(d)
	case baseDir == "":
		probs.add("machine_spirit.graphs_dir", "machine_spirit.graphs_dir = %s: a relative path needs the config file's directory to resolve against; use an absolute path", quote(d))
	default:
		cfg.MachineSpirit.GraphsDir = filepath.Join(baseDir, d)
	}
}

func handlerModuleKey(name string, sub ...string) string {
	return keyString(append([]string{"machine_spirit", "handler_modules", name}, sub...)...)
}

// resolveExecutorPaths makes relative executor paths and read_write and
// read_only entries absolute by joining them to baseDir.
func resolveExecutorPaths(cfg *Config, baseDir string, probs *problems) {
	for _, name := range slices.Sorted(maps.Keys(cfg.Executors)) {
		ex := cfg.Executors[name]
		if ex.Path == "" {
			continue // Validate reports the missing path
		}
		if filepath.IsAbs(ex.Path) {
			ex.Path = filepath.Clean(ex.Path)
		} else if baseDir == "" {
			probs.add(executorKey(name, "path"),
				"%s = %s: a relative path needs the config file's directory to resolve against; use an absolute path",
				executorKey(name, "path"), quote(ex.Path))
			continue
		} else {
			ex.Path = filepath.Join(baseDir, ex.Path)
		}
		// read_write and read_only entries too, so that every relative
		// path of the config means the same whatever directory the daemon
		// starts in.
		if ex.Interpreter != "" && !filepath.IsAbs(ex.Interpreter) && baseDir != "" {
			ex.Interpreter = filepath.Join(baseDir, ex.Interpreter)
		}
		if baseDir != "" {
			ex.ReadWrite = resolveAll(baseDir, ex.ReadWrite)
			ex.ReadOnly = resolveAll(baseDir, ex.ReadOnly)
		}
		cfg.Executors[name] = ex
	}
}

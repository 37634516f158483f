package config

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Bounds that are not plain numbers in the tables below.
const (
	maxExecutorArgs     = 16
	maxExecutorArgBytes = 256
	// messageFraming is the headroom left in a gRPC message for everything
	// besides the bounded payloads (ids, tokens, budgets, protobuf framing).
	messageFraming = 64 << 10
	// maxBytesPerChar is the worst case of UTF-8: limits counted in
	// characters can take up to four bytes each on the wire.
	maxBytesPerChar = 4
)

var (
	executorNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	sha256RE       = regexp.MustCompile(`^[0-9a-f]{64}$`)
	versionRE      = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	envNameRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// Validate checks every value and the rules between them. It returns nil or
// an [*Error] listing all the problems. Parse and Load call it; call it again
// after changing a Config in code.
//
// Executor paths must already be absolute here (Parse resolves relative ones).
func (c Config) Validate() error {
	if ps := c.validate(); len(ps) > 0 {
		return &Error{Problems: ps}
	}
	return nil
}

func (c Config) validate() problems {
	var ps problems
	c.Tasks.validate(&ps)
	c.MachineSpirit.validate(&ps)
	validateExecutors(c.Executors, &ps)
	c.Limits.validate(&ps)
	c.Model.validate(&ps)
	validateTools(c.Tools, &ps)
	c.Approvals.validate(&ps)
	c.Principals.validate(&ps)
	c.API.validate(&ps)
	c.Confinement.validate(&ps)
	c.Store.validate(&ps)
	c.Fleet.validate(&ps)
	c.validateParallel(&ps)
	c.validateDefaultExecutor(&ps)
	c.validateMessageSize(&ps)
	return ps
}

func (t Tasks) validate(ps *problems) {
	ps.intRange("tasks.max_concurrent", t.MaxConcurrent, 1, MaxConcurrentCap)
	ps.intRange("tasks.max_queued", t.MaxQueued, 1, 1024)
	ps.intRange("tasks.prestart", t.Prestart, 0, MaxPrestart)
	ps.intRange("tasks.max_subagents", t.MaxSubagents, 1, 64)
	ps.intRange("tasks.max_tree_depth", t.MaxTreeDepth, 1, 8)
	if hi := min(max(t.MaxConcurrent, 0), MaxConcurrentCap); t.MaxRunningPerPrincipal < 0 || t.MaxRunningPerPrincipal > hi {
		ps.add("tasks.max_running_per_principal",
			"tasks.max_running_per_principal = %d: must be between 0 and %d (tasks.max_concurrent); 0 means no bound of its own",
			t.MaxRunningPerPrincipal, hi)
	}
	ps.capped("tasks.max_steps", t.MaxSteps, 1, "tasks.max_steps_cap", t.MaxStepsCap, 1, 100000)
	ps.capped("tasks.max_tool_calls", t.MaxToolCalls, 0, "tasks.max_tool_calls_cap", t.MaxToolCallsCap, 0, 100000)
	ps.capped("tasks.max_model_calls", t.MaxModelCalls, 0, "tasks.max_model_calls_cap", t.MaxModelCallsCap, 0, 100000)
	ps.capped("tasks.max_depth", t.MaxDepth, 0, "tasks.max_depth_cap", t.MaxDepthCap, 0, 16)
	ps.capped("tasks.max_wall_seconds", t.MaxWallSeconds, 1, "tasks.max_wall_seconds_cap", t.MaxWallSecondsCap, 1, 7*24*3600)
	ps.capped("tasks.max_model_tokens", t.MaxModelTokens, 0, "tasks.max_model_tokens_cap", t.MaxModelTokensCap, 0, MaxModelTokensCap)
	ps.capped("tasks.max_output_bytes", t.MaxOutputBytes, 0, "tasks.max_output_bytes_cap", t.MaxOutputBytesCap, 0, MaxOutputBytesCap)
	ps.intRange("tasks.checkpoint_max_bytes", t.CheckpointMaxBytes, 1<<10, 3<<20)
	ps.intRange("tasks.retention_days", t.RetentionDays, 0, MaxRetentionDays)
	ps.intRange("tasks.max_parallel_model_calls", t.MaxParallelModelCalls, 1, MaxParallelModelCalls)
}

// validateParallel checks machinespirit's own bound on a step's model
// calls against the host's: a larger one could never be reached (the host
// would queue the calls past tasks.max_parallel_model_calls), so it is
// refused rather than silently lowered.
func (c Config) validateParallel(ps *problems) {
	p := c.MachineSpirit.MaxParallelModelCalls
	if p == nil {
		return
	}
	const key = "machine_spirit.max_parallel_model_calls"
	hi := min(max(c.Tasks.MaxParallelModelCalls, 1), MaxParallelModelCalls)
	if *p < 1 || *p > hi {
		ps.add(key, "%s = %d: must be between 1 and %d (tasks.max_parallel_model_calls, the host's bound for every executor; raise that one to allow more)", key, *p, hi)
	}
}

// MachineSpiritParallel is the bound machinespirit is started with on a
// step's model calls in flight: its own key, or the host's.
func (c Config) MachineSpiritParallel() int {
	return *cmp.Or(c.MachineSpirit.MaxParallelModelCalls, &c.Tasks.MaxParallelModelCalls)
}

func (m MachineSpirit) validate(ps *problems) {
	if !filepath.IsAbs(m.SwiplPath) {
		ps.add("machine_spirit.swipl_path",
			"machine_spirit.swipl_path = %s: must be an absolute path to the pinned swipl binary, e.g. \"/usr/bin/swipl\"",
			quote(m.SwiplPath))
	}
	if !versionRE.MatchString(m.SwiplVersion) {
		ps.add("machine_spirit.swipl_version",
			"machine_spirit.swipl_version = %s: must be an exact MAJOR.MINOR.PATCH version, e.g. \"9.0.4\" (as printed by swipl --version)",
			quote(m.SwiplVersion))
	}
	ps.intRange("machine_spirit.worker_memory_mb", m.WorkerMemoryMB, 256, 65536)
	ps.intRange("machine_spirit.worker_cpu_seconds", m.WorkerCPUSeconds, 1, 86400)
	if m.Prestart != nil {
		ps.intRange("machine_spirit.prestart", *m.Prestart, 0, MaxPrestart)
	}
	if n := len(m.HandlerModules); n > MaxHandlerModules {
		ps.add("machine_spirit.handler_modules", "machine_spirit.handler_modules has %d modules, at most %d", n, MaxHandlerModules)
	}
	validateGraphPins(m, ps)
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(m.HandlerModules)) {
		hm := m.HandlerModules[name]
		if !executorNameRE.MatchString(name) {
			ps.add(handlerModuleKey(name), "%s: invalid module name: 1 to 32 of a-z, 0-9, '-', '_', a lowercase letter first", handlerModuleKey(name))
		}
		if key := handlerModuleKey(name, "path"); hm.Path == "" {
			ps.add(key, "%s is missing: the module's Prolog file", key)
		} else if other, dup := seen[hm.Path]; dup {
			ps.add(key, "%s = %s: the same file as %s", key, quote(hm.Path), handlerModuleKey(other))
		} else {
			seen[hm.Path] = name
		}
		if key := handlerModuleKey(name, "sha256"); !sha256RE.MatchString(hm.SHA256) {
			ps.add(key, "%s = %s: must be the file's SHA-256, 64 lowercase hex characters as printed by sha256sum (a module is always pinned)", key, quote(hm.SHA256))
		}
	}
}

// graphIDRE is a MACHINE-SPIRIT graph id (plugins/machinespirit).
var graphIDRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// validateGraphPins checks the operator graphs: a dir and its pins come
// together, each pin names a graph id and a SHA-256.
func validateGraphPins(m MachineSpirit, ps *problems) {
	switch n := len(m.GraphPins); {
	case n > MaxOperatorGraphs:
		ps.add("machine_spirit.graph_pins", "machine_spirit.graph_pins has %d graphs, at most %d", n, MaxOperatorGraphs)
	case n > 0 && m.GraphsDir == "":
		ps.add("machine_spirit.graphs_dir", "machine_spirit.graphs_dir is missing: machine_spirit.graph_pins names graphs, which are read from NAME.pl in that directory")
	case n == 0 && m.GraphsDir != "":
		ps.add("machine_spirit.graph_pins", "machine_spirit.graph_pins is empty: name each graph of machine_spirit.graphs_dir to load with its SHA-256 (sha256sum NAME.pl); none is loaded unpinned")
	}
	for _, name := range slices.Sorted(maps.Keys(m.GraphPins)) {
		key := keyString("machine_spirit", "graph_pins", name)
		if !graphIDRE.MatchString(name) {
			ps.add(key, "%s: invalid graph id: 1 to 64 of a-z, 0-9, '_', a lowercase letter first", key)
		}
		if pin := m.GraphPins[name]; !sha256RE.MatchString(pin) {
			ps.add(key, "%s = %s: must be the graph file's SHA-256, 64 lowercase hex characters as printed by sha256sum", key, quote(pin))
		}
	}
}

func validateExecutors(execs map[string]Executor, ps *problems) {
	for _, name := range slices.Sorted(maps.Keys(execs)) {
		validateExecutor(name, execs[name], ps)
	}
}

func validateExecutor(name string, ex Executor, ps *problems) {
	key := executorKey(name)
	switch {
	case name == ExecutorLegacy || name == ExecutorMachineSpirit:
		ps.add(key, "%s: %q is a built-in executor and cannot be redefined; give the plugin another name", key, name)
	case !executorNameRE.MatchString(name):
		ps.add(key, "%s: invalid executor name %s: use 1 to 32 characters, a lowercase letter first, then lowercase letters, digits, '_' or '-'", key, quote(name))
	}

	pathKey := executorKey(name, "path")
	switch {
	case ex.Path == "":
		ps.add(pathKey, "%s is missing: set it to the plugin binary, absolute or relative to the config file's directory", pathKey)
	case strings.ContainsRune(ex.Path, 0):
		ps.add(pathKey, "%s contains a NUL byte", pathKey)
	case !filepath.IsAbs(ex.Path):
		ps.add(pathKey, "%s = %s: must be an absolute path", pathKey, quote(ex.Path))
	}

	checkPin(ps, executorKey(name, "sha256"), ex.SHA256)
	validateInterpreter(name, ex, ps)

	validateExecutorConfinement(name, ex, ps)
	if ex.Prestart != nil {
		ps.intRange(executorKey(name, "prestart"), *ex.Prestart, 0, MaxPrestart)
	}

	argsKey := executorKey(name, "args")
	if len(ex.Args) > maxExecutorArgs {
		ps.add(argsKey, "%s has %d arguments: at most %d are allowed", argsKey, len(ex.Args), maxExecutorArgs)
	}
	for i, a := range ex.Args {
		switch {
		case len(a) > maxExecutorArgBytes:
			ps.add(argsKey, "%s[%d] is %d bytes long: at most %d bytes are allowed", argsKey, i, len(a), maxExecutorArgBytes)
		case strings.ContainsRune(a, 0):
			ps.add(argsKey, "%s[%d] contains a NUL byte", argsKey, i)
		}
	}
}

func (l Limits) validate(ps *problems) {
	ps.intRange("limits.goal_chars", l.GoalChars, 1, 20000)
	ps.intRange("limits.summary_chars", l.SummaryChars, 100, 20000)
	ps.intRange("limits.recent_summaries", l.RecentSummaries, 0, 50)
	ps.intRange("limits.result_bytes", l.ResultBytes, 1<<10, 1<<20)
	ps.intRange("limits.event_bytes", l.EventBytes, 256, 4096)
	ps.intRange("limits.events_per_task", l.EventsPerTask, 10, 100000)
	ps.intRange("limits.plugin_start_seconds", l.PluginStartSeconds, 1, 120)
	ps.intRange("limits.plugin_stop_grace_seconds", l.PluginStopGraceSeconds, 1, 60)
	ps.intRange("limits.grpc_message_bytes", l.GRPCMessageBytes, 1<<20, 16<<20)
}

// validateDefaultExecutor checks that tasks.executor names an executor the
// host can run.
func (c Config) validateDefaultExecutor(ps *problems) {
	const key = "tasks.executor"
	name := c.Tasks.Executor
	switch {
	case name == ExecutorLegacy:
	case name == ExecutorMachineSpirit:
		if !c.MachineSpirit.Enabled {
			ps.add(key, "%s = %q but machine_spirit.enabled = false: enable it first with `[machine_spirit] enabled = true`, or choose another executor", key, name)
		}
	case name == "":
		ps.add(key, "%s is empty: set it to %q, %q or the NAME of an [executors.NAME] section", key, ExecutorLegacy, ExecutorMachineSpirit)
	default:
		if _, ok := c.Executors[name]; !ok {
			ps.add(key, "%s = %s: no such executor; use %s, or define it in an [%s] section",
				key, quote(name), strings.Join(c.knownExecutors(), ", "), executorKey(name))
		}
	}
}

// knownExecutors lists the executor names tasks.executor may take, quoted.
func (c Config) knownExecutors() []string {
	names := []string{fmt.Sprintf("%q", ExecutorLegacy)}
	if c.MachineSpirit.Enabled {
		names = append(names, fmt.Sprintf("%q", ExecutorMachineSpirit))
	}
	var custom []string
	for name := range c.Executors {
		if name != ExecutorLegacy && name != ExecutorMachineSpirit {
			custom = append(custom, quote(name))
		}
	}
	slices.Sort(custom)
	return append(names, custom...)
}

// validateMessageSize checks that the largest StepRequest and StepResult the
// limits allow fit in one gRPC message (DESIGN.md §4, §9):
//
//	request: checkpoint + recent summaries + goal + framing
//	result:  checkpoint + result + one summary + framing
//
// Characters are counted at their UTF-8 worst case of four bytes. Each limit
// alone may reach its maximum with the others at their defaults; raising
// several at once may need a larger limits.grpc_message_bytes.
func (c Config) validateMessageSize(ps *problems) {
	failed := ps.keySet()
	for _, k := range []string{"tasks.checkpoint_max_bytes", "limits.recent_summaries", "limits.summary_chars",
		"limits.goal_chars", "limits.result_bytes", "limits.grpc_message_bytes"} {
		if failed[k] {
			return // out of range already; the sum would only add noise
		}
	}
	t, l := c.Tasks, c.Limits
	request := t.CheckpointMaxBytes + l.RecentSummaries*l.SummaryChars*maxBytesPerChar +
		l.GoalChars*maxBytesPerChar + messageFraming
	result := t.CheckpointMaxBytes + l.ResultBytes + l.SummaryChars*maxBytesPerChar + messageFraming
	if request > l.GRPCMessageBytes {
		ps.add("limits.grpc_message_bytes",
			"limits.grpc_message_bytes = %d is too small for the largest step request (%d bytes = tasks.checkpoint_max_bytes + limits.recent_summaries × limits.summary_chars × %d + limits.goal_chars × %d + %d framing); raise it or lower those limits",
			l.GRPCMessageBytes, request, maxBytesPerChar, maxBytesPerChar, messageFraming)
	}
	if result > l.GRPCMessageBytes {
		ps.add("limits.grpc_message_bytes",
			"limits.grpc_message_bytes = %d is too small for the largest step result (%d bytes = tasks.checkpoint_max_bytes + limits.result_bytes + limits.summary_chars × %d + %d framing); raise it or lower those limits",
			l.GRPCMessageBytes, result, maxBytesPerChar, messageFraming)
	}
}

// checkPin checks an optional SHA-256 pin.
func checkPin(ps *problems, key, pin string) {
	if pin == "" || sha256RE.MatchString(pin) {
		return
	}
	hint := "as printed by sha256sum"
	if sha256RE.MatchString(strings.ToLower(pin)) {
		hint = "write it in lowercase"
	}
	ps.add(key, "%s = %s: must be 64 lowercase hexadecimal characters (%s), or be left out to not pin the file",
		key, quote(pin), hint)
}

// validateInterpreter checks an interpreted executor's interpreter and its
// pin: a pinned script needs its interpreter pinned too, or the pin would
// say nothing about what runs it.
func validateInterpreter(name string, ex Executor, ps *problems) {
	key, shaKey := executorKey(name, "interpreter"), executorKey(name, "interpreter_sha256")
	checkPin(ps, shaKey, ex.InterpreterSHA256)
	switch {
	case ex.Interpreter == "":
		if ex.InterpreterSHA256 != "" {
			ps.add(shaKey, "%s is set but %s is not: name the interpreter it pins", shaKey, key)
		}
		return
	case len(ex.Interpreter) > 4096:
		ps.add(key, "%s is %d bytes long: at most 4096 bytes are allowed", key, len(ex.Interpreter))
	case strings.ContainsRune(ex.Interpreter, 0):
		ps.add(key, "%s contains a NUL byte", key)
	case !filepath.IsAbs(ex.Interpreter):
		ps.add(key, "%s = %s: must be an absolute path", key, quote(ex.Interpreter))
	}
	if ex.SHA256 != "" && ex.InterpreterSHA256 == "" {
		ps.add(shaKey, "%s is missing: %s pins the script, so pin its interpreter too (sha256sum %s)", shaKey, executorKey(name, "sha256"), ex.Interpreter)
	}
	if ex.SHA256 == "" && ex.InterpreterSHA256 != "" {
		ps.add(executorKey(name, "sha256"), "%s is missing: %s pins the interpreter, so pin the script too (sha256sum %s)", executorKey(name, "sha256"), shaKey, ex.Path)
	}
}

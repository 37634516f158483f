package datadir

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
)

// executorSpecs lists the executors to register: every
// taskhost-executor-KIND binary in dir, then [executors.KIND] from the
// config, which overrides a discovered one of the same kind. cacheDir is
// where machinespirit keeps its saved state; trampoline, when set, is the
// host's dedicated trampoline, which machinespirit then starts its worker
// through as well. pooled says plugins run under uids of the daemon's pool.
func executorSpecs(dir, cacheDir, trampoline string, pooled bool, cfg config.Config) ([]plugin.PluginSpec, error) {
	dir = executorDirOf(dir)
	if dir == "" {
		return nil, errors.New("locate executors: the running binary's path is unknown")
	}
	found := map[string]plugin.PluginSpec{}
	entries, _ := os.ReadDir(dir) // a missing dir just has no executors
	for _, e := range entries {
		kind, ok := strings.CutPrefix(e.Name(), ExecutorPrefix)
		if ok && kind != "" && !e.IsDir() {
			found[kind] = plugin.PluginSpec{Kind: kind, Path: filepath.Join(dir, e.Name())}
		}
	}
	for kind := range found {
		s := found[kind]
		s.Confine = confinementFrom(cfg.Confinement, config.Executor{})
		s.Prestart = cfg.Tasks.Prestart
		found[kind] = s
	}
	for kind, ex := range cfg.Executors {
		found[kind] = plugin.PluginSpec{Kind: kind, Path: ex.Path, Args: ex.Args, SHA256: ex.SHA256,
			Interpreter: ex.Interpreter, InterpreterSHA256: ex.InterpreterSHA256, Confine: confinementFrom(cfg.Confinement, ex),
			Prestart: *cmp.Or(ex.Prestart, &cfg.Tasks.Prestart)}
	}
	if ms, ok := found[config.ExecutorMachineSpirit]; ok {
		ms.Prestart = *cmp.Or(cfg.MachineSpirit.Prestart, &cfg.Tasks.Prestart)
		if !cfg.MachineSpirit.Enabled {
			delete(found, config.ExecutorMachineSpirit)
		} else {
			if err := machineSpiritArgs(&ms, cacheDir, trampoline, pooled, cfg); err != nil {
				return nil, err
			}
			found[config.ExecutorMachineSpirit] = ms
		}
	}
	var specs []plugin.PluginSpec
	for _, s := range found {
		specs = append(specs, s)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Kind < specs[j].Kind })
	return specs, nil
}

// machineSpiritArgs fits the machinespirit plugin's spec to the config: its
// pinned runtime, handler modules and operator graphs as flags, what its
// confinement must let it read, and its saved-state cache.
func machineSpiritArgs(ms *plugin.PluginSpec, cacheDir, trampoline string, pooled bool, cfg config.Config) error {
	// The pinned runtime travels as flags; the plugin's preflight
	// checks it and reports the result in Describe.
	ms.Args = append(ms.Args, "--swipl", cfg.MachineSpirit.SwiplPath, "--swipl-version", cfg.MachineSpirit.SwiplVersion,
		"--checkpoint-max-bytes", strconv.Itoa(cfg.Tasks.CheckpointMaxBytes),
		"--worker-memory-mb", strconv.Itoa(cfg.MachineSpirit.WorkerMemoryMB),
		"--worker-cpu-seconds", strconv.Itoa(cfg.MachineSpirit.WorkerCPUSeconds),
		"--max-parallel-model-calls", strconv.Itoa(cfg.MachineSpiritParallel()))
	if cfg.MachineSpirit.RLMGoalMode {
		ms.Args = append(ms.Args, "--rlm-goal-mode")
	}
	// The plugin reads each module once, checks its pin on those
	// bytes and loads them; Landlock lets it read only these files.
	for _, name := range slices.Sorted(maps.Keys(cfg.MachineSpirit.HandlerModules)) {
		hm := cfg.MachineSpirit.HandlerModules[name]
		ms.Args = append(ms.Args, "--handler-module", hm.Path+"="+hm.SHA256)
		ms.Confine.ReadOnly = append(slices.Clip(ms.Confine.ReadOnly), hm.Path)
	}
	// Operator graphs: the plugin reads each pinned NAME.pl of the
	// dir once and checks its pin on those bytes.
	if len(cfg.MachineSpirit.GraphPins) > 0 {
		ms.Args = append(ms.Args, "--graphs-dir", cfg.MachineSpirit.GraphsDir)
		for _, name := range slices.Sorted(maps.Keys(cfg.MachineSpirit.GraphPins)) {
			ms.Args = append(ms.Args, "--graph-pin", name+"="+cfg.MachineSpirit.GraphPins[name])
		}
		ms.Confine.ReadOnly = append(slices.Clip(ms.Confine.ReadOnly), cfg.MachineSpirit.GraphsDir)
	}
	// It runs its pinned swipl as a worker process.
	ms.Confine.Subprocesses = true
	ms.Confine.ReadOnly = append(ms.Confine.ReadOnly, cfg.MachineSpirit.SwiplPath)
	if trampoline != "" {
		// Its own binary would do, at ~8 ms more per worker start.
		ms.Args = append(ms.Args, "--trampoline", trampoline)
		ms.Confine.ReadOnly = append(ms.Confine.ReadOnly, trampoline)
	} else {
		// It starts its worker through its own binary, by path:
		// under a uid of its own that path must be reachable.
		ms.Confine.ReadOnly = append(ms.Confine.ReadOnly, ms.Path)
	}
	// Its compiled saved state is kept across starts (~0.4 s each
	// to build), in a cache only the daemon's uid reaches. A
	// plugin under a uid of the pool gets a copy of it per launch
	// (a cache its uid could write would let one task's process
	// plant the state a later task's worker loads); one run as
	// another user builds at every start.
	if ms.Confine.User == "" {
		msCache := filepath.Join(cacheDir, config.ExecutorMachineSpirit)
		if err := os.MkdirAll(msCache, 0o700); err != nil {
			return fmt.Errorf("executor cache dir: %w", err)
		}
		if pooled {
			// A copy per launch, seeded by probes only.
			ms.Confine.SeedCache, ms.Confine.SeedCacheFlag = msCache, "--state-cache-dir"
		} else {
			ms.Args = append(ms.Args, "--state-cache-dir", msCache)
			ms.Confine.ReadWrite = append(slices.Clip(ms.Confine.ReadWrite), msCache)
		}
	}
	return nil
}

// executorDirOf is the directory executors (and the trampoline) are found
// in: dir, or the running binary's when dir is empty ("" when that is
// unknown).
func executorDirOf(dir string) string {
	if dir != "" {
		return dir
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Dir(exe)
}

// TrampolinePath is where the dedicated trampoline was found, for
// machinespirit's worker, which starts through it from inside its own
// confinement; "" when there is none.
func (d *Dir) TrampolinePath() string {
	if d.trampoline == nil {
		return ""
	}
	return d.trampoline.path
}

package plugin

import (
	"fmt"
	"strings"
	"time"

	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/confine"
)

// Each plugin process, with everything it starts (machinespirit's Prolog
// worker), runs in cgroups of its own (internal/cgroups), made when its
// process is built (pluginCgroups, called where its policy is): on cgroup2
// it is started inside its cgroup, on cgroup v1 the trampoline joins its
// cgroups before the plugin's first instruction. A watch reads their
// counters while it runs and ends the whole tree at its memory or process
// limit; its ExitStatus then carries a *LimitError, which the host's crash
// verdict names. When the process is stopped its cgroups are killed and
// removed; a daemon killed before that leaves them to the next daemon's
// sweep (cgroups.Find).

// pluginLimitPoll is how often a running plugin's cgroup counters are
// read. On cgroup2 the kernel ends an out-of-memory plugin itself
// (memory.oom.group); the watch ends the tree at a refused fork, and on
// cgroup v1 a process waiting at its memory limit.
const pluginLimitPoll = 50 * time.Millisecond

// Default cgroup limits of a plugin process the configuration says
// nothing about ([confinement] memory_mb, cpu_percent; its pids limit is
// its RLIMIT_NPROC).
const (
	DefaultPluginMemoryMB   = 2048
	DefaultPluginCPUPercent = 100
)

// findCgroups decides once, for every plugin the registry starts, how
// their cgroups are made, and says at WARN when they bound nothing.
func findCgroups(opts *PluginOptions) {
	if opts.Cgroups == nil {
		set := cgroups.Find(true)
		opts.Cgroups = &set
	}
	if !opts.Cgroups.Limited() {
		opts.Logger.Warn("plugins have no cgroup limits: their memory, processes and CPU are bounded per process by rlimits only (docs/security.md)",
			"why", opts.Cgroups.Why)
	}
}

// cgroupLimits are c's limits, zero fields taking the defaults.
func (c Confinement) cgroupLimits() cgroups.Limits {
	l := c.Cgroup
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = DefaultPluginMemoryMB << 20
	}
	if l.Pids <= 0 {
		l.Pids = int(c.Rlimits.NProc)
		if l.Pids <= 0 {
			l.Pids = DefaultPluginProcesses
		}
	}
	if l.CPUPercent <= 0 {
		l.CPUPercent = DefaultPluginCPUPercent
	}
	return l
}

// pluginCgroups makes the cgroups of one plugin process and fits its
// policy to them: the trampoline joins the v1 ones, and RLIMIT_NPROC is
// lifted past the pids limit so that the pids controller refuses a fork
// first and says why. nil, nil: no cgroup can be made here.
func pluginCgroups(set *cgroups.Set, c Confinement, pol *confine.Policy) (*cgroups.Box, error) {
	if set == nil || (set.V2 == nil && set.V1 == nil) {
		return nil, nil
	}
	box, err := set.New("plugin-", c.cgroupLimits())
	if err != nil {
		return nil, fmt.Errorf("plugin cgroups: %w", err)
	}
	pol.JoinCgroups = box.Join()
	if set.Limited() {
		pol.Rlimits.NProc += cgroups.NProcHeadroom
	}
	return box, nil
}

// cgroupSummary says how kind's plugins are bounded by cgroups, e.g.
// ", cgroup1 (memory 2048 MiB, 4096 processes, 100% CPU)"; "" without.
func cgroupSummary(set *cgroups.Set, c Confinement) string {
	if set == nil || !set.Limited() {
		return ""
	}
	return ", " + set.Mode + " (" + c.cgroupLimits().String() + ")"
}

// limitError is the typed cause of a plugin ended at limit.
func limitError(limit string, l cgroups.Limits) *LimitError {
	switch limit {
	case cgroups.LimitMemory:
		return &LimitError{Limit: limit, Bound: fmt.Sprintf("memory_mb = %d", l.MemoryBytes>>20)}
	case cgroups.LimitProcesses:
		return &LimitError{Limit: limit, Bound: fmt.Sprintf("max_processes = %d", l.Pids)}
	}
	return &LimitError{Limit: limit, Bound: strings.TrimSpace(l.String())}
}

package tools

import (
	"fmt"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/cgroups"
)

// A shell.run command's memory, processes and CPU are bounded as a whole by
// cgroup controllers, where the daemon has them (internal/cgroups: cgroup2
// where the controllers are delegated, else cgroup v1 joined by the
// trampoline, else the rlimits only, said once at WARN). A command that
// reaches its memory, process or disk limit is ended at once, whole, and
// its result names the limit.

// Names of the limits in a shell.run result's "limit".
const (
	limitMemory    = cgroups.LimitMemory
	limitProcesses = cgroups.LimitProcesses
	limitDisk      = "disk"
)

// limitPoll is how often a running command's counters are read.
const limitPoll = 20 * time.Millisecond

// setupResources finds how this registry's commands are bounded (see the
// comment at the top of this file) and whether their writes are bounded by
// a filesystem (disk.go), and says once, at WARN, what is missing.
func (r *Registry) setupResources(pol config.Tool) {
	lim := cgroups.Limits{MemoryBytes: int64(pol.CommandMemoryMB) << 20, Pids: pol.MaxProcesses, CPUPercent: pol.CommandCPUPercent}
	// A v1 cgroup is joined by the trampoline: only a confined command can.
	set := cgroups.Find(r.confine != nil)
	r.cgroups, r.v1, r.resources = set.V2, set.V1, set.Mode
	if !set.Limited() {
		r.log.Warn("shell.run commands have no cgroup limits: their memory, processes and CPU are bounded per process by rlimits only (docs/security.md)",
			"why", set.Why)
	} else if r.confine != nil {
		r.confine.rlimits.NProc += cgroups.NProcHeadroom
	}
	r.limits = lim
	if r.confine == nil {
		r.diskWhy = "commands run unconfined"
	} else if err := diskSupported(); err != nil {
		r.diskWhy = err.Error()
	}
	if r.diskWhy != "" {
		r.log.Warn("shell.run commands write their workspace directly: its size is bounded by the tools' checks and max_file_mb only (docs/security.md)",
			"why", r.diskWhy)
	}
}

// Resources says how shell.run commands' memory, processes, CPU and
// writes are bounded here, e.g. "cgroup1 (memory 1024 MiB, 256
// processes, 100% CPU), disk: workspace overlay (64 MiB)".
func (r *Registry) Resources() string {
	s := r.resources
	if r.resources != cgroups.ModeNone {
		s += " (" + r.limits.String() + ")"
	}
	if r.diskWhy == "" {
		return s + fmt.Sprintf(", disk: workspace overlay (%d MiB)", MaxWorkspaceBytes>>20)
	}
	return s + ", disk: write checks only (" + r.diskWhy + ")"
}

// watchLimits polls the command's counters until its End; on the first
// limit reached it kills the command's container.
func watchLimits(box container, v1 *cgroups.Cgroups1, disk *workspaceDisk) *cgroups.Watch {
	hit := func() string {
		if h := box.hit(); h != "" {
			return h
		}
		if v1 != nil {
			if h := v1.Hit(); h != "" {
				return h
			}
		}
		if disk != nil && disk.full() {
			return limitDisk
		}
		return ""
	}
	return cgroups.NewWatch(limitPoll, hit, func() {
		box.kill()
		if v1 != nil {
			v1.Kill()
		}
	})
}

package datadir

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/confine"
)

// confinementFrom maps the [confinement] defaults and one [executors.NAME]
// section onto a Confinement: its rlimits and its cgroups' limits, the
// section's where it sets them. Every plugin runs under a uid of its own
// from a root daemon's pool unless the section names a user.
func confinementFrom(c config.Confinement, ex config.Executor) plugin.Confinement {
	pick := func(own, def int) uint64 {
		if own > 0 {
			return uint64(own)
		}
		return uint64(def)
	}
	return plugin.Confinement{
		Rlimits: confine.Rlimits{
			AddressSpace: pick(ex.MaxAddressSpaceMB, c.MaxAddressSpaceMB) << 20,
			NoFile:       pick(ex.MaxOpenFiles, c.MaxOpenFiles),
			NProc:        pick(ex.MaxProcesses, c.MaxProcesses),
		},
		Cgroup: cgroups.Limits{
			MemoryBytes: int64(pick(ex.MemoryMB, c.MemoryMB)) << 20,
			Pids:        int(pick(ex.MaxProcesses, c.MaxProcesses)),
			CPUPercent:  int(pick(ex.CPUPercent, c.CPUPercent)),
		},
		DiskBytes:    int64(pick(ex.DiskMB, c.DiskMB)) << 20,
		User:         ex.User,
		OwnUID:       ex.User == "",
		ReadWrite:    ex.ReadWrite,
		ReadOnly:     ex.ReadOnly,
		Subprocesses: ex.Subprocesses,
	}
}

// markNonDumpable keeps the daemon's /proc environ and memory out of
// reach of its children, which may run as the same user.
func markNonDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("mark the host non-dumpable: %w", err)
	}
	return nil
}

package config

import (
	"path/filepath"
	"regexp"
	"strings"

	"github.com/taskhost/taskhost/internal/uids"
)

// Confinement is the [confinement] section: how every executor plugin is
// confined (docs/security.md). The rlimits are the defaults of plugins
// whose [executors.NAME] sets none, and the limits of the built-in ones.
type Confinement struct {
	// Required makes every plugin executor unavailable, and shell.run
	// refuse to run, on a kernel without Landlock (fail closed) instead of
	// running them less confined.
	Required          bool `toml:"required"`             // default true
	MaxAddressSpaceMB int  `toml:"max_address_space_mb"` // 64..1048576, default 4096 (RLIMIT_AS)
	MaxOpenFiles      int  `toml:"max_open_files"`       // 64..65536, default 1024 (RLIMIT_NOFILE)
	MaxProcesses      int  `toml:"max_processes"`        // 16..65536, default 4096 (RLIMIT_NPROC: every process and thread of the plugin's uid; and its cgroup's pids.max)
	// MemoryMB and CPUPercent bound each plugin process with everything
	// it starts (machinespirit's Prolog worker), as a whole, in a cgroup
	// of its own (internal/cgroups), where the daemon may make one.
	MemoryMB   int `toml:"memory_mb"`   // memory limit, 64..1048576, default 2048
	CPUPercent int `toml:"cpu_percent"` // CPU bandwidth, % of one CPU, 1..6400, default 100
	// DiskMB bounds what a plugin under a uid of its own writes beneath
	// its run dir (HOME, TMPDIR, its socket dir): a tmpfs of this size.
	DiskMB int `toml:"disk_mb"` // 16..1048576, default 1024
	// UIDFirst and UIDCount are the range of uids a root daemon runs each
	// shell.run command under, one per command (internal/uids); UIDCount
	// 0 runs them as the daemon's uid.
	UIDFirst int `toml:"uid_first"` // 65536..2147483646, default 2000000000
	UIDCount int `toml:"uid_count"` // 0..1048576, default 65536
}

// Bounds of the plugin rlimits and paths.
const (
	minAddressSpaceMB, maxAddressSpaceMB = 64, 1 << 20
	minOpenFiles, maxOpenFiles           = 64, 65536
	minProcesses, maxProcesses           = 16, 65536
	minMemoryMB, maxMemoryMB             = 64, 1 << 20
	minCPUPercent, maxCPUPercent         = 1, 6400
	minDiskMB, maxDiskMB                 = 16, 1 << 20
	maxExecutorReadWrite                 = 8
	maxUserBytes                         = 32
)

var userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]*[$]?$`)

func (c Confinement) validate(ps *problems) {
	ps.intRange("confinement.max_address_space_mb", c.MaxAddressSpaceMB, minAddressSpaceMB, maxAddressSpaceMB)
	ps.intRange("confinement.max_open_files", c.MaxOpenFiles, minOpenFiles, maxOpenFiles)
	ps.intRange("confinement.max_processes", c.MaxProcesses, minProcesses, maxProcesses)
	ps.intRange("confinement.memory_mb", c.MemoryMB, minMemoryMB, maxMemoryMB)
	ps.intRange("confinement.cpu_percent", c.CPUPercent, minCPUPercent, maxCPUPercent)
	ps.intRange("confinement.disk_mb", c.DiskMB, minDiskMB, maxDiskMB)
	ps.intRange("confinement.uid_count", c.UIDCount, 0, uids.MaxCount)
	if c.UIDCount > 0 && c.UIDCount <= uids.MaxCount {
		// The range's last uid stays at uids.MaxLast at most.
		ps.intRange("confinement.uid_first", c.UIDFirst, uids.MinFirst, uids.MaxLast-c.UIDCount+1)
	}
}

func validateExecutorConfinement(name string, ex Executor, ps *problems) {
	for _, l := range []struct {
		key    string
		v      int
		lo, hi int
	}{
		{"max_address_space_mb", ex.MaxAddressSpaceMB, minAddressSpaceMB, maxAddressSpaceMB},
		{"max_open_files", ex.MaxOpenFiles, minOpenFiles, maxOpenFiles},
		{"max_processes", ex.MaxProcesses, minProcesses, maxProcesses},
		{"memory_mb", ex.MemoryMB, minMemoryMB, maxMemoryMB},
		{"cpu_percent", ex.CPUPercent, minCPUPercent, maxCPUPercent},
		{"disk_mb", ex.DiskMB, minDiskMB, maxDiskMB},
	} {
		if l.v != 0 { // 0: [confinement]'s default
			ps.intRange(executorKey(name, l.key), l.v, l.lo, l.hi)
		}
	}
	if ex.User != "" {
		key := executorKey(name, "user")
		switch {
		case len(ex.User) > maxUserBytes:
			ps.add(key, "%s is %d bytes long: at most %d bytes are allowed", key, len(ex.User), maxUserBytes)
		case !userRE.MatchString(ex.User):
			ps.add(key, "%s = %s: not a user name (lowercase letters, digits, '_' and '-', a letter or '_' first)", key, quote(ex.User))
		case ex.User == "root":
			ps.add(key, "%s = \"root\": a plugin never runs as root; leave the key out to run it as the daemon's user", key)
		}
	}
	checkPaths(ps, executorKey(name, "read_write"), ex.ReadWrite)
	checkPaths(ps, executorKey(name, "read_only"), ex.ReadOnly)
}

// checkPaths checks a list of at most maxExecutorReadWrite absolute paths
// of at most 4096 bytes each.
func checkPaths(ps *problems, key string, paths []string) {
	if len(paths) > maxExecutorReadWrite {
		ps.add(key, "%s has %d paths: at most %d are allowed", key, len(paths), maxExecutorReadWrite)
	}
	for i, p := range paths {
		switch {
		case len(p) > 4096:
			ps.add(key, "%s[%d] is %d bytes long: at most 4096 bytes are allowed", key, i, len(p))
		case strings.ContainsRune(p, 0):
			ps.add(key, "%s[%d] contains a NUL byte", key, i)
		case !filepath.IsAbs(p):
			ps.add(key, "%s[%d] = %s: must be an absolute path", key, i, quote(p))
		}
	}
}

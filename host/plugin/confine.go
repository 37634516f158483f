package plugin

import (
	"cmp"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/confine"
)

// Confinement is what one executor kind's plugin processes are allowed
// beyond the common policy: the system paths read-only, their binary, their
// socket dir and their private dir.
type Confinement struct {
	Rlimits confine.Rlimits
	// Cgroup bounds the plugin process with everything it starts, as a
	// whole, in cgroups of its own where the daemon may make them
	// (cgroup.go); zero fields take the defaults.
	Cgroup   cgroups.Limits
	User     string   // run the plugin as this local user; "" = the daemon's
	UID, GID int      // resolved from User at launch
	ReadOnly []string // more read-only paths, e.g. the pinned swipl
	// ReadWrite are more paths it may read and write ([executors.NAME] read_write).
	ReadWrite []string
	// Subprocesses lets the plugin fork and exec (machinespirit runs its
	// Prolog worker); without it seccomp refuses both.
	Subprocesses bool
	// OwnUID runs each of its processes under a uid of its own from the
	// registry's pool (PluginOptions.UIDs; a root daemon's), when User
	// names none: its RLIMIT_NPROC then counts its own processes only,
	// and nothing keyed on the daemon's uid reaches it. Its ReadOnly and
	// ReadWrite paths must then be reachable through their "others"
	// mode bits; a launch checks that first (reach.go).
	OwnUID bool
	// SeedCache, for a plugin under a uid of its own, is a cache dir only
	// the daemon reaches; each launch gets a copy of it, named to the
	// plugin by the flag SeedCacheFlag, and a probe's additions are kept
	// (seedcache.go).
	SeedCache, SeedCacheFlag string
	// DiskBytes bounds what a plugin under a uid other than the daemon's
	// writes beneath its run dir, a tmpfs of this size (rundisk.go); 0
	// takes DefaultPluginDiskMB.
	DiskBytes int64
}

// Default plugin rlimits, used where the configuration sets none.
const (
	DefaultPluginAddressSpaceMB = 4096
	DefaultPluginOpenFiles      = 1024
	DefaultPluginProcesses      = 4096
	DefaultPluginDiskMB         = 1024
)

// DefaultConfinement is the confinement of a kind the configuration says
// nothing about.
func DefaultConfinement() Confinement {
	return Confinement{
		Rlimits: confine.Rlimits{
			AddressSpace: DefaultPluginAddressSpaceMB << 20,
			NoFile:       DefaultPluginOpenFiles,
			NProc:        DefaultPluginProcesses,
		},
		Cgroup: cgroups.Limits{MemoryBytes: DefaultPluginMemoryMB << 20, Pids: DefaultPluginProcesses, CPUPercent: DefaultPluginCPUPercent},
	}
}

// systemReadOnly is what a Go plugin (static or linked against libc) and
// swipl need to start: the loader, the libraries, the zone database, and
// the two devices. Missing entries (no /lib64 on arm64) are left out.
var systemReadOnly = []string{
	"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin",
	"/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group",
	"/dev/urandom", "/dev/random",
}

// pluginPolicy is the confine.Policy of one plugin process.
func pluginPolicy(c Confinement, require bool, privateDir, socketDir string) confine.Policy {
	p := confine.Policy{
		Dir:       privateDir,
		ReadWrite: append([]string{socketDir, privateDir, "/dev/null"}, c.ReadWrite...),
		Landlock:  confine.LandlockBestEffort,
		Rlimits:   c.Rlimits,
		Seccomp: confine.Seccomp{
			DenyPtrace:  true,
			DenyNetwork: true,
			// As uid 0 it could reach any root daemon's socket that trusts
			// its peer's uid (docker, systemd, D-Bus) and the host's own API.
			DenyConnect: true,
			DenyFork:    !c.Subprocesses,
			DenyExec:    !c.Subprocesses,
		},
		DropCaps:  true,
		UID:       c.UID,
		GID:       c.GID,
		Pdeathsig: syscall.SIGKILL,
	}
	if require {
		p.Landlock = confine.LandlockRequired
	}
	for _, path := range append(append([]string(nil), systemReadOnly...), c.ReadOnly...) {
		if _, err := os.Stat(path); err == nil {
			p.ReadOnly = append(p.ReadOnly, path)
		}
	}
	return p
}

// newPrivateDir creates a plugin's empty 0700 working dir under base,
// owned by the plugin's user when it has one.
func newPrivateDir(base string, c Confinement) (string, error) {
	dir, err := os.MkdirTemp(base, "run-")
	if err != nil {
		return "", fmt.Errorf("plugin private dir: %w", err)
	}
	if c.UID > 0 {
		if err := os.Chown(dir, c.UID, c.GID); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("plugin private dir: %w", err)
		}
	}
	return dir, nil
}

// runBase is where a plugin's socket dir and private dir are made: the
// data dir's plugins dir, whose parents only the daemon's user can
// traverse. A plugin run as another user gets a fresh 0711 dir under the
// system temp dir instead (its own dirs inside stay 0700 and its own), and
// cleanup names it so that Stop removes it whole.
//
// That run dir is a tmpfs of c.DiskBytes where the daemon may mount one
// (rundisk.go): what the plugin writes there is bounded, and a daemon
// that died leaves it to the next start on the same data dir
// (SweepRunDirs). Where no tmpfs can be mounted, bounded is false.
func runBase(socketDir string, c Confinement) (base, cleanup string, bounded bool, err error) {
	if c.UID == 0 {
		return socketDir, "", false, nil
	}
	base, err = os.MkdirTemp("", RunDirPrefix(socketDir))
	if err != nil {
		return "", "", false, fmt.Errorf("plugin run dir: %w", err)
	}
	bounded, err = mountRunDisk(base, cmp.Or(c.DiskBytes, DefaultPluginDiskMB<<20))
	if err == nil {
		err = os.Chmod(base, 0o711)
	}
	if err != nil {
		removeRunDir(base)
		return "", "", false, fmt.Errorf("plugin run dir: %w", err)
	}
	return base, base, bounded, nil
}

// ConfinementError says a plugin cannot be confined as required.
type ConfinementError struct {
	Kind    string
	Support confine.Support
}

func (e *ConfinementError) Error() string {
	return fmt.Sprintf("executor %q: confinement is required but this kernel offers %s: run on a kernel with Landlock (Linux 5.13+, lsm=landlock), or set [confinement] required = false to run plugins without filesystem confinement (docs/security.md)", e.Kind, e.Support)
}

// resolveUser fills in UID and GID from User.
func (c *Confinement) resolveUser() error {
	if c.User == "" {
		return nil
	}
	u, err := user.Lookup(c.User)
	if err != nil {
		return err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return err
	}
	if uid == 0 || gid == 0 {
		return fmt.Errorf("user %q is uid %d gid %d: a plugin never runs as root", c.User, uid, gid)
	}
	c.UID, c.GID = uid, gid
	return nil
}

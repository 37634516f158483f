package tools

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/confine"
)

// shellReadOnly are the system paths a confined command may read and
// execute: the programs and their libraries, the few files of /etc a shell
// and its tools look up, and the harmless devices. Nothing else is
// reachable: not the data dir (store, key, other workspaces), not /proc
// (another process's environ or memory), not /tmp, not /home. Paths this
// system lacks are left out.
var shellReadOnly = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32",
	"/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group",
	"/etc/alternatives",
	"/dev/urandom", "/dev/random", "/dev/zero",
}

// shellConfinement is how shell.run commands are confined.
type shellConfinement struct {
	trampoline string // an executable whose main calls confine.Main first
	required   bool   // no Landlock: refuse to run commands
	network    bool   // [tools."shell.run"] network: commands keep the host's network
	rlimits    confine.Rlimits
	support    confine.Support
	readOnly   []string // shellReadOnly as present here
}

// ErrUnconfined: confinement is required ([confinement] required = true)
// and this kernel cannot confine a command; shell.run refuses to run.
var ErrUnconfined = errors.New("tools: shell.run: confinement is required but the kernel offers no Landlock: run on a kernel with Landlock, or set [confinement] required = false to run commands without filesystem confinement (docs/security.md)")

func newShellConfinement(trampoline string, required bool, pol config.Tool) (*shellConfinement, error) {
	if trampoline == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("tools: shell.run trampoline: %w", err)
		}
		trampoline = exe
	}
	c := &shellConfinement{trampoline: trampoline, required: required, network: pol.Network, support: confine.Probe(),
		rlimits: confine.Rlimits{
			NProc:        uint64(pol.MaxProcesses),
			AddressSpace: uint64(pol.MaxMemoryMB) << 20,
			CPUSeconds:   uint64(pol.MaxCPUSeconds),
			FileSize:     uint64(pol.MaxFileMB) << 20,
		}}
	for _, p := range shellReadOnly {
		if _, err := os.Stat(p); err == nil {
			c.readOnly = append(c.readOnly, p)
		}
	}
	return c, nil
}

// policy confines a command to its workspace: Landlock read-write there
// (files only: Landlock gives no execute right where one may write),
// read-only on the system paths, no_new_privs, no capabilities, no ptrace,
// and signals and abstract sockets scoped to the command's own processes.
func (c *shellConfinement) policy(workspace string, uid int) confine.Policy {
	p := confine.Policy{
		Dir:       workspace,
		ReadOnly:  c.readOnly,
		ReadWrite: []string{workspace, "/dev/null"},
		Landlock:  confine.LandlockBestEffort,
		Seccomp:   confine.Seccomp{DenyPtrace: true},
		DropCaps:  true,
		Rlimits:   c.rlimits,
		UID:       uid,
		GID:       uid,
		Pdeathsig: syscall.SIGKILL,
	}
	if c.required {
		p.Landlock = confine.LandlockRequired
	}
	if !c.network {
		// No network by default: a root daemon gives the command a network
		// namespace of its own with only loopback; one that is not root
		// cannot, and refuses it every socket but a unix one.
		if os.Geteuid() == 0 {
			p.NewNetNS = true
		} else {
			p.Seccomp.DenyNetwork = true
		}
	}
	return p
}

// command returns the exec.Cmd of /bin/sh -c command in workspace, started
// through the trampoline, under uid (0: the daemon's), joining the cgroup
// v1 directories join, and seeing its workspace through an overlay on
// disk when it is set.
func (c *shellConfinement) command(workspace, command string, uid int, join []string, disk *workspaceDisk) (*exec.Cmd, error) {
	if c.required && c.support.LandlockABI < 1 {
		return nil, ErrUnconfined
	}
	p := c.policy(workspace, uid)
	p.JoinCgroups = join
	if disk != nil {
		p.Overlay = disk.mnt
	}
	cmd, err := confine.Command(c.trampoline, p, nil, "/bin/sh", "-c", command)
	if errors.Is(err, confine.ErrLandlockUnavailable) {
		return nil, ErrUnconfined
	}
	if err != nil {
		return nil, fmt.Errorf("confine /bin/sh: %w", err)
	}
	return cmd, nil
}

// Confinement says how shell.run commands run here, e.g. "landlock abi 7,
// no_new_privs, no capabilities, seccomp; cgroup" or "none (no Landlock);
// session". The host logs it at start, at WARN when there is no Landlock.
func (r *Registry) Confinement() string {
	s := "unconfined"
	if r.confine != nil {
		s = r.confine.policy("/", 0).Summary(r.confine.support)
		if r.confine.required && r.confine.support.LandlockABI < 1 {
			s += ", required: shell.run refuses to run"
		}
	}
	if r.uids != nil {
		s += ", own uid (" + r.uids.Range().String() + ")"
	}
	return s + "; " + r.Containment() + "; " + r.Resources()
}

// Landlocked reports whether shell.run commands run under Landlock here.
func (r *Registry) Landlocked() bool {
	return r.confine != nil && r.confine.support.LandlockABI >= 1
}

// shellPolicy is shell.run's configured policy, its zero limits (a test's
// literal, an older caller) taking the defaults: a command is never run
// without its bounds.
func shellPolicy(cfg map[string]config.Tool) config.Tool {
	d := config.Default().Tools[ToolShellRun]
	p, ok := cfg[ToolShellRun]
	if !ok {
		return d
	}
	for _, f := range []struct{ v, d *int }{{&p.MaxProcesses, &d.MaxProcesses}, {&p.MaxMemoryMB, &d.MaxMemoryMB},
		{&p.MaxCPUSeconds, &d.MaxCPUSeconds}, {&p.MaxFileMB, &d.MaxFileMB},
		{&p.CommandMemoryMB, &d.CommandMemoryMB}, {&p.CommandCPUPercent, &d.CommandCPUPercent}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	return p
}

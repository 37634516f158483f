// Package confine starts a child process confined on Linux: Landlock,
// no_new_privs, rlimits, an emptied capability set, optional credentials and
// a seccomp deny-list, all in place before the target's first instruction.
//
// Go's os/exec cannot run code between fork and exec, so confinement goes
// through a re-exec trampoline. [Command] starts a binary whose main calls
// [Main] first; in the trampoline role Main locks its goroutine to its OS
// thread, applies the policy to that thread (Landlock and seccomp are
// per-thread without their "all threads" flags; credentials are per-thread in
// the kernel) and calls execveat from the same thread, which discards every
// other thread of the trampoline. The target therefore starts with exactly
// what the exec'ing thread had.
//
// # Exec what was hashed
//
// The trampoline never opens the target by path once the caller has an open
// file: [Command] takes that file (execFD), passes it as an inherited fd, and
// the trampoline finds it again by device and inode, marks it close-on-exec
// and calls execveat(fd, "", AT_EMPTY_PATH). Swapping the path after the
// caller opened (and hashed) the file changes nothing. The file's own inode
// is added to the Landlock ruleset (read and execute) from that fd, so the
// caller need not list a path that might not be the inode it hashed.
//
// # Seccomp DenyExec
//
// The trampoline must exec its target once after the filter is loaded, but
// the target must not exec again. A filter cannot tell "before" from "after"
// an exec, and the obvious conditions are forgeable by the target: a path
// pointer can be recreated at the same address, an fd number can be reused.
// Instead, the trampoline draws a 64-bit random secret and the filter allows
// execveat only when its sixth register — unused by the kernel for execveat —
// equals the secret; execve is refused outright. The secret exists only in
// the trampoline's memory, which the exec replaces, and in the loaded BPF
// program, which a process can read back only with CAP_SYS_ADMIN
// (PTRACE_SECCOMP_GET_FILTER) — a capability the target does not have when
// DropCaps is set, and ptrace of it is refused by DenyPtrace and Landlock's
// ptrace scoping. Guessing costs one syscall per try over 2^64 values.
//
// Every filter first kills the process on a foreign architecture (a 32-bit
// int 0x80 entry on amd64 would otherwise skip an amd64 deny-list) and
// refuses the x32 ABI, and refuses io_uring, whose operations (socket, ...)
// do not pass through seccomp.
package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Mode says how Landlock is applied.
type Mode int

const (
	// LandlockOff applies no Landlock ruleset.
	LandlockOff Mode = iota
	// LandlockBestEffort applies the ruleset where the kernel supports
	// Landlock and runs the child unrestricted by Landlock elsewhere.
	LandlockBestEffort
	// LandlockRequired refuses to start the child without Landlock.
	LandlockRequired
)

func (m Mode) String() string {
	switch m {
	case LandlockOff:
		return "off"
	case LandlockBestEffort:
		return "best_effort"
	case LandlockRequired:
		return "required"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}

// Rlimits are hard and soft limits set in the trampoline. 0 leaves a limit
// as inherited; a value above the inherited hard limit is lowered to it.
type Rlimits struct {
	AddressSpace uint64 // RLIMIT_AS, bytes
	CPUSeconds   uint64 // RLIMIT_CPU: the soft limit; the hard one is a second more, so SIGXCPU says why first
	NoFile       uint64 // RLIMIT_NOFILE
	NProc        uint64 // RLIMIT_NPROC: counts every process and thread of the child's real uid
	FileSize     uint64 // RLIMIT_FSIZE, bytes: a write past it gets SIGXFSZ
}

// Seccomp selects the deny-lists of the child's seccomp filter.
type Seccomp struct {
	DenyExec    bool // execve and execveat, after the trampoline's own exec
	DenyFork    bool // fork, vfork, clone without CLONE_THREAD, clone3 (ENOSYS, so libcs fall back to clone)
	DenyNetwork bool // socket(2) of any family but AF_UNIX
	DenyPtrace  bool // ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, process_madvise, perf_event_open
	// DenyConnect refuses connect(2), and sockets of any type but
	// SOCK_STREAM, so the child can reach no listening socket by path — a
	// root-owned daemon's socket that trusts uid 0, say — while it may
	// still listen and accept (a go-plugin server with a multiplexed broker).
	DenyConnect bool
}

func (s Seccomp) any() bool {
	return s.DenyExec || s.DenyFork || s.DenyNetwork || s.DenyPtrace || s.DenyConnect
}

// Policy is what a confined child gets. Zero values mean "not limited"
// except where noted. NoNewPrivs is always set.
type Policy struct {
	Dir       string   // working directory (must exist); the child starts there
	ReadOnly  []string // Landlock: paths readable and executable
	ReadWrite []string // Landlock: paths readable and writable (not executable: write xor execute)
	Landlock  Mode
	Rlimits   Rlimits
	Seccomp   Seccomp
	DropCaps  bool // empty every capability set and the bounding set; lock root out of regaining them
	UID, GID  int  // >0: setgroups/setgid/setuid before exec; 0 = unchanged
	// NewNetNS gives the child a network namespace of its own holding only
	// a loopback interface, up: it reaches nothing outside itself. It
	// needs CAP_SYS_ADMIN, so a root trampoline (Command refuses it
	// otherwise); Seccomp.DenyNetwork is the unprivileged way to no network.
	NewNetNS  bool
	Pdeathsig syscall.Signal // re-armed in the trampoline after any credential change
	// JoinCgroups are cgroup directories (of cgroup v1 hierarchies: a
	// child cannot be started inside one, as clone3 can for cgroup2) the
	// trampoline moves itself into first, before it runs anything of the
	// target's: every process the target forks is born inside. Needs a
	// trampoline allowed to write their cgroup.procs.
	JoinCgroups []string
	// Overlay, when set, is a detached tmpfs mount (fsmount(2)) holding
	// the directories "upper" and "work": the trampoline gives the child a
	// mount namespace of its own in which Dir is an overlay of Dir itself
	// (lower) and that upper. The child's writes to Dir land in the
	// tmpfs, bounded by its size, and Dir is left as it was; the caller,
	// which keeps its own descriptor of the mount, reads them from there
	// once the child is gone. Needs a root trampoline.
	Overlay *os.File `json:"-"`
}

// Bounds of a policy: a policy travels on the trampoline's command line.
const (
	MaxPaths     = 64
	MaxPathBytes = 4096
	MaxCgroups   = 8
)

// PolicyError says which field of a policy is wrong.
type PolicyError struct {
	Field string // e.g. "Dir", "ReadOnly[2]"
	Value string
	Err   error
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("confine: policy %s %q: %v", e.Field, e.Value, e.Err)
}

func (e *PolicyError) Unwrap() error { return e.Err }

var (
	// ErrNotAbsolute: a path of the policy is relative.
	ErrNotAbsolute = errors.New("path is not absolute")
	// ErrNotDir: Dir is not a directory.
	ErrNotDir = errors.New("not a directory")
	// ErrTooMany: a list or a path is longer than its bound.
	ErrTooMany = errors.New("over its bound")
	// ErrBadValue: a field has a value outside its range.
	ErrBadValue = errors.New("value out of range")
	// ErrLandlockUnavailable: LandlockRequired on a kernel without Landlock.
	ErrLandlockUnavailable = errors.New("landlock is required but the kernel does not offer it")
	// ErrSeccompUnavailable: a seccomp deny-list on a kernel without seccomp filters.
	ErrSeccompUnavailable = errors.New("seccomp is required but the kernel does not offer it")
)

// trampolineArg0 marks the trampoline role in argv[0]; argv[1] is
// guardArg, argv[2] the encoded policy, argv[3:] the target's argv.
const trampolineArg0 = "confine-trampoline"

// guardArg makes a Go test binary that was wrongly used as a trampoline (its
// TestMain does not call Main) run no test and exit, instead of running its
// whole suite — which could start plugins through itself again.
const guardArg = "-test.run=^$"

// ExitCode is the trampoline's exit status when it cannot apply the policy
// or exec the target (the shell's "cannot execute").
const ExitCode = 126

// wire is the policy as the trampoline reads it.
type wire struct {
	Policy  Policy
	Target  string
	Parent  int    // the pid that must stay the trampoline's parent
	FDDev   uint64 // identity of the exec fd; 0/0 when the target is opened by path
	FDIno   uint64
	HasExec bool
	// Identity of the overlay's tmpfs mount (Policy.Overlay), found again
	// among the inherited fds as the exec fd is.
	OverlayDev, OverlayIno uint64
	HasOverlay             bool
}

// Command returns an exec.Cmd that runs target with args under p through the
// trampoline (an executable whose main calls Main; usually os.Executable()).
//
// When execFD is non-nil the trampoline execs that open file instead of
// opening target again; target is then only the child's argv[0]. The caller
// sets Stdin, Stdout, Stderr, Env and SysProcAttr as usual; to pass files of
// its own it sets cmd.ExtraFiles = append(own, cmd.ExtraFiles...) so they
// keep the numbers 3, 4, ... (the trampoline finds execFD by identity, not
// by number, and the target does not inherit it).
func Command(trampoline string, p Policy, execFD *os.File, target string, args ...string) (*exec.Cmd, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(trampoline) {
		return nil, &PolicyError{Field: "trampoline", Value: trampoline, Err: ErrNotAbsolute}
	}
	if !filepath.IsAbs(target) {
		return nil, &PolicyError{Field: "target", Value: target, Err: ErrNotAbsolute}
	}
	if p.Landlock == LandlockRequired && landlockABI() < 1 {
		return nil, ErrLandlockUnavailable
	}
	if p.Seccomp.any() && !seccompSupported() {
		return nil, ErrSeccompUnavailable
	}
	if p.NewNetNS && os.Geteuid() != 0 {
		return nil, &PolicyError{Field: "NewNetNS", Value: "true", Err: fmt.Errorf("%w: a network namespace needs a root trampoline", ErrBadValue)}
	}
	if p.Overlay != nil && os.Geteuid() != 0 {
		return nil, &PolicyError{Field: "Overlay", Value: p.Overlay.Name(), Err: fmt.Errorf("%w: a mount namespace needs a root trampoline", ErrBadValue)}
	}
	w := wire{Policy: p, Target: target, Parent: os.Getpid()}
	var extra []*os.File
	if p.Overlay != nil {
		dev, ino, err := dirID(p.Overlay)
		if err != nil {
			return nil, fmt.Errorf("confine: overlay fd: %w", err)
		}
		w.OverlayDev, w.OverlayIno, w.HasOverlay = dev, ino, true
		extra = append(extra, p.Overlay)
	}
	if execFD != nil {
		dev, ino, err := fileID(execFD)
		if err != nil {
			return nil, fmt.Errorf("confine: exec fd: %w", err)
		}
		w.FDDev, w.FDIno, w.HasExec = dev, ino, true
	}
	enc, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("confine: encode policy: %w", err)
	}
	cmd := &exec.Cmd{
		Path: trampoline,
		Args: append([]string{trampolineArg0, guardArg, string(enc), target}, args...),
		Dir:  p.Dir,
	}
	if execFD != nil {
		extra = append(extra, execFD)
	}
	cmd.ExtraFiles = extra
	return cmd, nil
}

func (p Policy) validate() error {
	if !filepath.IsAbs(p.Dir) {
		return &PolicyError{Field: "Dir", Value: p.Dir, Err: ErrNotAbsolute}
	}
	fi, err := os.Stat(p.Dir)
	if err != nil {
		return &PolicyError{Field: "Dir", Value: p.Dir, Err: err}
	}
	if !fi.IsDir() {
		return &PolicyError{Field: "Dir", Value: p.Dir, Err: ErrNotDir}
	}
	if n := len(p.ReadOnly) + len(p.ReadWrite); n > MaxPaths {
		return &PolicyError{Field: "ReadOnly+ReadWrite", Value: fmt.Sprint(n), Err: fmt.Errorf("%w: %d paths, at most %d", ErrTooMany, n, MaxPaths)}
	}
	for name, paths := range map[string][]string{"ReadOnly": p.ReadOnly, "ReadWrite": p.ReadWrite} {
		for i, path := range paths {
			field := fmt.Sprintf("%s[%d]", name, i)
			switch {
			case len(path) > MaxPathBytes:
				return &PolicyError{Field: field, Value: path[:64] + "...", Err: fmt.Errorf("%w: %d bytes, at most %d", ErrTooMany, len(path), MaxPathBytes)}
			case !filepath.IsAbs(path):
				return &PolicyError{Field: field, Value: path, Err: ErrNotAbsolute}
			}
			if _, err := os.Stat(path); err != nil {
				return &PolicyError{Field: field, Value: path, Err: err}
			}
		}
	}
	if len(p.JoinCgroups) > MaxCgroups {
		return &PolicyError{Field: "JoinCgroups", Value: fmt.Sprint(len(p.JoinCgroups)), Err: fmt.Errorf("%w: %d cgroups, at most %d", ErrTooMany, len(p.JoinCgroups), MaxCgroups)}
	}
	for i, dir := range p.JoinCgroups {
		field := fmt.Sprintf("JoinCgroups[%d]", i)
		switch {
		case len(dir) > MaxPathBytes:
			return &PolicyError{Field: field, Value: dir[:64] + "...", Err: fmt.Errorf("%w: %d bytes, at most %d", ErrTooMany, len(dir), MaxPathBytes)}
		case !filepath.IsAbs(dir):
			return &PolicyError{Field: field, Value: dir, Err: ErrNotAbsolute}
		}
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			return &PolicyError{Field: field, Value: dir, Err: err}
		}
	}
	if p.Landlock < LandlockOff || p.Landlock > LandlockRequired {
		return &PolicyError{Field: "Landlock", Value: p.Landlock.String(), Err: ErrBadValue}
	}
	if p.UID < 0 || p.GID < 0 {
		return &PolicyError{Field: "UID/GID", Value: fmt.Sprintf("%d/%d", p.UID, p.GID), Err: ErrBadValue}
	}
	if p.UID > 0 && p.GID == 0 {
		// Keeping group 0 would leave root's group files open to the child.
		return &PolicyError{Field: "GID", Value: "0", Err: fmt.Errorf("%w: a UID needs a non-root GID", ErrBadValue)}
	}
	if p.Pdeathsig < 0 || p.Pdeathsig > 64 {
		return &PolicyError{Field: "Pdeathsig", Value: fmt.Sprint(int(p.Pdeathsig)), Err: ErrBadValue}
	}
	return nil
}

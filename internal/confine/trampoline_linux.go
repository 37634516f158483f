package confine

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Main must be the first call in main() of every binary used as a
// trampoline. In the trampoline role (argv[0] is the trampoline marker) it
// applies the policy and execs the target and never returns: on error it
// writes one line "confine: <what failed>: <err>" to stderr and exits 126.
// Otherwise it returns at once.
func Main() {
	if len(os.Args) < 4 || os.Args[0] != trampolineArg0 || os.Args[1] != guardArg {
		return
	}
	// Everything below acts on this OS thread, and the exec must come from
	// the same thread: it is the one whose credentials, Landlock domain and
	// seccomp filter the target inherits.
	runtime.LockOSThread()
	what, err := trampoline(os.Args[2], os.Args[3:])
	fmt.Fprintf(os.Stderr, "confine: %s: %v\n", what, err)
	os.Exit(ExitCode)
}

// trampoline returns only on failure, naming the step that failed.
//
// It is one function, longer than most here, on purpose: its order is the
// confinement's argument (cgroups before anything runs, the target opened
// before Landlock closes the filesystem, capabilities dropped before the
// credentials change, seccomp last), and reads best as one sequence.
func trampoline(enc string, argv []string) (string, error) {
	var w wire
	if err := json.Unmarshal([]byte(enc), &w); err != nil {
		return "decode policy", err
	}
	p := w.Policy

	// First, so that everything after — the target and all it forks — is
	// counted against the cgroups' limits.
	if err := joinCgroups(p.JoinCgroups); err != nil {
		return "join cgroup", err
	}
	fd, err := targetFD(w)
	if err != nil {
		return "open target", err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "no_new_privs", err
	}
	if p.NewNetNS {
		// Namespaces are the thread's: the exec from this thread takes it.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return "network namespace", err
		}
		if err := loopbackUp(); err != nil {
			return "network namespace", err
		}
	}
	if w.HasOverlay {
		// Before the Landlock ruleset, which opens Dir: its rule must be
		// the overlay's directory, not the one it covers.
		mnt, err := overlayFD(w)
		if err != nil {
			return "overlay", err
		}
		err = mountOverlay(p.Dir, mnt)
		unix.Close(mnt)
		if err != nil {
			return "overlay", err
		}
	}
	if err := setRlimits(p.Rlimits); err != nil {
		return "rlimits", err
	}
	if p.DropCaps {
		// Needs CAP_SETPCAP, so before any credential change.
		if err := lockOutCaps(); err != nil {
			return "drop capabilities", err
		}
	}
	ruleset := -1
	if p.Landlock != LandlockOff {
		if ruleset, err = landlockRuleset(p, fd); err != nil {
			return "landlock", err
		}
	}
	if p.UID > 0 {
		if err := setCreds(p.UID, p.GID); err != nil {
			return "set credentials", err
		}
	}
	if p.DropCaps {
		if err := clearCaps(); err != nil {
			return "drop capabilities", err
		}
	}
	if p.Pdeathsig != 0 {
		// A credential change clears the parent-death signal; and the parent
		// may have died before it was re-armed.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(p.Pdeathsig), 0, 0, 0); err != nil {
			return "pdeathsig", err
		}
		if os.Getppid() != w.Parent {
			return "pdeathsig", fmt.Errorf("parent %d is gone", w.Parent)
		}
	}
	if err := restrictLandlock(ruleset); err != nil {
		return "landlock", err
	}
	var secret uint64
	if p.Seccomp.any() {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "seccomp secret", err
		}
		secret = binary.LittleEndian.Uint64(b[:])
		if err := loadSeccomp(p.Seccomp, secret); err != nil {
			return "seccomp", err
		}
	}
	if !w.HasExec {
		// The caller pinned nothing: exec by path, which also runs scripts
		// (an AT_EMPTY_PATH exec of a close-on-exec fd cannot).
		return "exec " + w.Target, execveat(unix.AT_FDCWD, w.Target, 0, argv, os.Environ(), secret, p.Rlimits.AddressSpace)
	}
	return "exec " + w.Target, execveat(fd, "", unix.AT_EMPTY_PATH, argv, os.Environ(), secret, p.Rlimits.AddressSpace)
}

// targetFD returns a close-on-exec fd of the target: the inherited exec fd
// when the caller passed one, else the target opened by path.
func targetFD(w wire) (int, error) {
	if !w.HasExec {
		return unix.Open(w.Target, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1, err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if st.Dev == w.FDDev && st.Ino == w.FDIno {
			// The target must not inherit its own binary's fd.
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
				return -1, err
			}
			return fd, nil
		}
	}
	return -1, fmt.Errorf("the exec fd (dev %d, inode %d) was not inherited", w.FDDev, w.FDIno)
}

func fileID(f *os.File) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, 0, fmt.Errorf("%s is not a regular file", f.Name())
	}
	return st.Dev, st.Ino, nil
}

// setRlimits sets every limit but RLIMIT_AS, which execveat sets last: the
// trampoline is a Go program whose reserved address space can exceed a
// limit meant for the target, and its runtime dies when it cannot map.
func setRlimits(r Rlimits) error {
	for _, l := range []struct {
		name     string
		resource int
		value    uint64
	}{
		{"RLIMIT_CPU", unix.RLIMIT_CPU, r.CPUSeconds},
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, r.NoFile},
		{"RLIMIT_NPROC", unix.RLIMIT_NPROC, r.NProc},
		{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, r.FileSize},
	} {
		if l.value == 0 {
			continue
		}
		if err := setLimit(l.resource, l.value); err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
	}
	return nil
}

// setLimit sets resource's soft and hard limit to v, or to the current hard
// limit when that is lower.
func setLimit(resource int, v uint64) error {
	var cur unix.Rlimit
	if err := unix.Prlimit(0, resource, nil, &cur); err != nil {
		return err
	}
	v = min(v, cur.Max)
	hard := v
	if resource == unix.RLIMIT_CPU && v < cur.Max {
		// A second of headroom: at the soft limit the kernel sends
		// SIGXCPU, which says why; at a hard limit reached at once it
		// sends only SIGKILL.
		hard = v + 1
	}
	if err := unix.Prlimit(0, resource, &unix.Rlimit{Cur: v, Max: hard}, nil); err != nil {
		return fmt.Errorf("=%d: %w", v, err)
	}
	return nil
}

// Securebits that keep uid 0 from regaining capabilities on exec or setuid,
// each locked so the target cannot clear it.
const lockedSecurebits = 1<<0 | 1<<1 | // SECBIT_NOROOT, _LOCKED
	1<<2 | 1<<3 | // SECBIT_NO_SETUID_FIXUP, _LOCKED
	1<<5 | // SECBIT_KEEP_CAPS_LOCKED (KEEP_CAPS off)
	1<<6 | 1<<7 // SECBIT_NO_CAP_AMBIENT_RAISE, _LOCKED

// lockOutCaps empties the bounding set and locks the securebits; the
// effective, permitted and inheritable sets still hold what the credential
// change needs until clearCaps.
func lockOutCaps() error {
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if err == unix.EINVAL { // past CAP_LAST_CAP
				break
			}
			return fmt.Errorf("bounding set cap %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, lockedSecurebits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	return nil
}

func clearCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// setCreds changes this thread's credentials with raw syscalls: the
// syscall package's Setuid acts on all threads (and fails in cgo binaries),
// and only the exec'ing thread matters here.
func setCreds(uid, gid int) error {
	groups := []uint32{uint32(gid)}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 1, uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", uid, e)
	}
	return nil
}

// execveat execs from this thread. addressSpace (RLIMIT_AS, 0 = unchanged)
// is set after the last allocation, just before the exec.
func execveat(dirfd int, path string, flags int, argv, env []string, secret, addressSpace uint64) error {
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	pathp, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	if addressSpace > 0 {
		if err := setLimit(unix.RLIMIT_AS, addressSpace); err != nil {
			return fmt.Errorf("RLIMIT_AS: %w", err)
		}
	}
	_, _, e := unix.RawSyscall6(unix.SYS_EXECVEAT, uintptr(dirfd), uintptr(unsafe.Pointer(pathp)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])), uintptr(flags), uintptr(secret))
	runtime.KeepAlive(argvp)
	runtime.KeepAlive(envp)
	runtime.KeepAlive(pathp)
	return e
}

// loopbackUp brings up the loopback interface of the calling thread's
// network namespace (a new one starts with it down).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

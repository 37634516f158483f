package confine

import (
	"fmt"
	"unsafe"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

func landlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// fsRights returns the filesystem rights Landlock ABI abi knows: all of
// them are handled, so anything not granted by a rule is denied.
func fsRights(abi int) uint64 {
	r := uint64(ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSReadDir |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar | ll.AccessFSMakeDir |
		ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym)
	if abi >= 2 {
		r |= ll.AccessFSRefer
	}
	if abi >= 3 {
		r |= ll.AccessFSTruncate
	}
	if abi >= 5 {
		r |= ll.AccessFSIoctlDev
	}
	return r
}

// Rights that apply to a file (rather than a directory) beneath a rule.
const fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev

const (
	readRights  = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	execRights  = ll.AccessFSExecute | ll.AccessFSReadFile
	writeRights = ^uint64(ll.AccessFSExecute) // everything else, masked by what the ABI handles
)

// landlockRuleset builds the ruleset of p, or returns -1 where the kernel
// has no Landlock and p allows that. It runs before any credential change:
// a rule's path is opened with the trampoline's own rights, so a child run
// under another uid may be given a directory (its workspace) whose parents
// it cannot traverse itself. restrictLandlock enforces it.
func landlockRuleset(p Policy, execFD int) (int, error) {
	abi := landlockABI()
	if abi < 1 {
		if p.Landlock == LandlockRequired {
			return -1, ErrLandlockUnavailable
		}
		return -1, nil
	}
	handled := fsRights(abi)
	attr := ll.RulesetAttr{HandledAccessFS: handled}
	if abi >= 6 {
		// Signals and abstract unix sockets stay inside the child's own
		// domain: it cannot signal the daemon or a sibling plugin.
		attr.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	rs, err := createRuleset(&attr, abi)
	if err != nil {
		return -1, fmt.Errorf("create ruleset: %w", err)
	}
	if err := addRules(rs, p, execFD, handled); err != nil {
		unix.Close(rs)
		return -1, err
	}
	return rs, nil
}

// addRules adds p's paths and the exec target to ruleset rs.
func addRules(rs int, p Policy, execFD int, handled uint64) error {
	add := func(fd int, rights uint64) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			rights &= fileRights
		}
		return ll.LandlockAddPathBeneathRule(rs, &ll.PathBeneathAttr{AllowedAccess: rights & handled, ParentFd: fd}, 0)
	}
	for _, set := range []struct {
		paths  []string
		rights uint64
	}{{p.ReadOnly, readRights}, {p.ReadWrite, writeRights}} {
		for _, path := range set.paths {
			fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("rule %s: %w", path, err)
			}
			err = add(fd, set.rights)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("rule %s: %w", path, err)
			}
		}
	}
	// The inode about to be exec'd, whatever its path now points at.
	if err := add(execFD, execRights); err != nil {
		return fmt.Errorf("rule for the target: %w", err)
	}
	return nil
}

// restrictLandlock enforces ruleset rs (from landlockRuleset; -1: none) on
// the calling thread only: go-landlock's Restrict syncs all threads (psx),
// which is neither needed before an exec from this thread nor available in
// cgo binaries.
func restrictLandlock(rs int) error {
	if rs < 0 {
		return nil
	}
	defer unix.Close(rs)
	return ll.LandlockRestrictSelf(rs, 0)
}

// createRuleset passes the attribute size the ABI knows: the quiet fields
// are only accepted since ABI 10.
func createRuleset(attr *ll.RulesetAttr, abi int) (int, error) {
	size := unsafe.Sizeof(*attr)
	if abi < 10 {
		size = unsafe.Offsetof(attr.QuietAccessFS)
	}
	r0, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), size, 0)
	if e != 0 {
		return -1, e
	}
	return int(r0), nil
}

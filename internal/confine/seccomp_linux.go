package confine

import (
	"errors"
	"fmt"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

func seccompSupported() bool { return seccomp.Supported() }

// program assembles the filter for s: a deny-list over a default of allow,
// behind an architecture guard that kills the process on any other ABI.
func program(s Seccomp, secret uint64) ([]unix.SockFilter, error) {
	eperm := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	var groups []seccomp.SyscallGroup
	// io_uring operations (socket, openat, ...) bypass seccomp.
	groups = append(groups, seccomp.SyscallGroup{Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}, Action: eperm})
	if s.DenyExec {
		groups = append(groups,
			seccomp.SyscallGroup{Names: []string{"execve"}, Action: eperm},
			seccomp.SyscallGroup{NamesWithCondtions: []seccomp.NameWithConditions{{
				Name:       "execveat",
				Conditions: seccomp.ArgumentConditions{{Argument: 5, Operation: seccomp.NotEqual, Value: secret}},
			}}, Action: eperm})
	}
	if s.DenyFork {
		groups = append(groups,
			seccomp.SyscallGroup{Names: []string{"fork", "vfork"}, Action: eperm},
			// clone3 passes its flags in memory a filter cannot read;
			// ENOSYS makes libcs and Go fall back to clone.
			seccomp.SyscallGroup{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)},
			seccomp.SyscallGroup{NamesWithCondtions: []seccomp.NameWithConditions{{
				Name:       "clone",
				Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsNotSet, Value: unix.CLONE_THREAD}},
			}}, Action: eperm})
	}
	if s.DenyNetwork {
		groups = append(groups, seccomp.SyscallGroup{NamesWithCondtions: []seccomp.NameWithConditions{{
			Name:       "socket",
			Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}},
		}}, Action: seccomp.ActionErrno | seccomp.Action(unix.EACCES)})
	}
	if s.DenyConnect {
		groups = append(groups,
			seccomp.SyscallGroup{Names: []string{"connect"}, Action: eperm},
			// Datagram and seqpacket sockets could send to a path without
			// connect: only SOCK_STREAM (1) is left, whatever its flags.
			seccomp.SyscallGroup{NamesWithCondtions: []seccomp.NameWithConditions{{
				Name:       "socket",
				Conditions: seccomp.ArgumentConditions{{Argument: 1, Operation: seccomp.BitsSet, Value: 0xe}},
			}}, Action: eperm})
	}
	if s.DenyPtrace {
		groups = append(groups, seccomp.SyscallGroup{
			Names:  []string{"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise", "perf_event_open"},
			Action: eperm,
		})
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	pol := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
	body, err := pol.Assemble()
	if err != nil {
		return nil, err
	}
	insts := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}, body...)
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// loadSeccomp loads the filter on the calling thread only (no TSYNC): the
// exec that follows comes from this thread.
func loadSeccomp(s Seccomp, secret uint64) error {
	prog, err := program(s, secret)
	if err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	if len(prog) > 0xffff {
		return errors.New("filter too long")
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return e
	}
	return nil
}

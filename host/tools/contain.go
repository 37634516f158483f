package tools

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/taskhost/taskhost/internal/cgroups"
)

// A shell.run command must not leave anything running: not its background
// jobs, and not a process that left its process group and session with
// setsid. A process group alone does not hold the second, so each command
// runs in a cgroup v2 of its own, which no process can leave without write
// access to the cgroup tree (a confined command has none), and whose
// cgroup.kill reaches every member at once. Where no cgroup2 is writable,
// the command runs as a session of its own, and the kill reaches the
// session, its process group and their descendants found through /proc —
// which misses a process that called setsid and whose parent is gone
// already; docs/security.md says so.

// container holds the processes of one command.
type container interface {
	// setup prepares attr so that the child starts inside; called once,
	// before Start.
	setup(attr *syscall.SysProcAttr)
	// started is called after Start with the child's pid, or with 0 if
	// Start failed.
	started(pid int)
	// kill sends SIGKILL to every process inside. It may be called any
	// number of times.
	kill()
	// release kills what is left and frees the container; the container is
	// not used again.
	release() error
	// hit names the limit (limitMemory, limitProcesses) its controllers
	// say the command reached, or "": it has none, or none was reached.
	// Read before release.
	hit() string
}

// cgroupContainer is one command's cgroup2 cgroup (internal/cgroups).
type cgroupContainer struct{ cg *cgroups.Cgroup2 }

func (c cgroupContainer) setup(attr *syscall.SysProcAttr) {
	c.cg.Setup(attr)
	// Its own group too, for a kill of the group when the cgroup's own
	// kill is not there.
	attr.Setpgid = true
}

func (c cgroupContainer) started(int)    { c.cg.Started() }
func (c cgroupContainer) kill()          { c.cg.Kill() }
func (c cgroupContainer) release() error { return c.cg.Release() }
func (c cgroupContainer) hit() string    { return c.cg.Hit() }

// sessionContainer is the fallback without a writable cgroup2: the
// command is a session (and process group) of its own.
type sessionContainer struct {
	sid int
}

func (s *sessionContainer) setup(attr *syscall.SysProcAttr) {
	attr.Setsid = true
}

func (s *sessionContainer) started(pid int) { s.sid = pid }

// kill stops every process whose session or process group is the
// command's, and every descendant of one, then kills them all. The list is
// read from /proc while their parents still live (a killed parent's
// children are handed to init at once, and are no longer found as its
// descendants), and read again until it no longer grows: a stopped process
// cannot fork, so a fork racing the first reading is caught by the next.
func (s *sessionContainer) kill() {
	if s.sid <= 0 {
		return
	}
	found := map[int]bool{}
	for range 20 {
		grew := false
		for _, pid := range sessionMembers(s.sid) {
			if !found[pid] {
				found[pid], grew = true, true
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
		}
		if !grew {
			break
		}
	}
	_ = syscall.Kill(-s.sid, syscall.SIGKILL)
	for pid := range found {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func (s *sessionContainer) release() error {
	s.kill()
	return nil
}

func (s *sessionContainer) hit() string { return "" }

// sessionMembers lists the live processes whose session or process group
// is sid, and their descendants.
func sessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	type proc struct{ ppid, pgid, sid int }
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold anything; the fields
		// after its last ')' are: state ppid pgrp session ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		sess, _ := strconv.Atoi(f[3])
		procs[pid] = proc{ppid, pgid, sess}
	}
	in := map[int]bool{}
	for pid, p := range procs {
		if p.sid == sid || p.pgid == sid {
			in[pid] = true
		}
	}
	// Descendants: a process whose parent is in; repeat until stable.
	for grew := true; grew; {
		grew = false
		for pid, p := range procs {
			if !in[pid] && in[p.ppid] {
				in[pid], grew = true, true
			}
		}
	}
	pids := make([]int, 0, len(in))
	for pid := range in {
		pids = append(pids, pid)
	}
	return pids
}

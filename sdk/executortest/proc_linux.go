package executortest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// errNoPlugin: no plugin process of the kind is running (yet).
var errNoPlugin = errors.New("no executor process found")

// findChild returns the pid of the live child of parent whose argv[0] is
// argv0: the executor plugin a taskhost process started.
func findChild(parent int, argv0 string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("executortest: finding the executor process: %w", err)
	}
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, err := procStat(pid)
		if err != nil || ppid != parent || state == 'Z' {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if arg0, _, _ := strings.Cut(string(cmdline), "\x00"); arg0 == argv0 {
			found = append(found, pid)
		}
	}
	switch len(found) {
	case 0:
		return 0, errNoPlugin
	case 1:
		return found[0], nil
	}
	return 0, fmt.Errorf("executortest: %d processes of %s under taskhost (pid %d): %v; a host runs one plugin per running task", len(found), argv0, parent, found)
}

// gone reports whether pid has exited (a zombie counts as exited).
func gone(pid int) bool {
	_, state, err := procStat(pid)
	return err != nil || state == 'Z'
}

// procStat reads a process's parent pid and state from /proc/PID/stat:
// "pid (comm) state ppid ...", where comm may hold spaces and parentheses.
func procStat(pid int) (ppid int, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err
}

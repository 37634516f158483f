package confine

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Marked reports whether process pid carries the marks of a process this
// package confined with DropCaps and a seccomp deny-list: no_new_privs, a
// seccomp filter and an empty capability bounding set. All three are
// irreversible and inherited by every descendant, orphaned or not, so a
// host can refuse its own API to everything it confined, however it forked.
func Marked(pid int) (bool, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, err
	}
	defer f.Close()
	var nnp, seccomp, capBnd string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "NoNewPrivs":
			nnp = v
		case "Seccomp":
			seccomp = v
		case "CapBnd":
			capBnd = v
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if nnp == "" || seccomp == "" || capBnd == "" {
		return false, fmt.Errorf("confine: /proc/%d/status lacks NoNewPrivs, Seccomp or CapBnd", pid)
	}
	bnd, err := strconv.ParseUint(capBnd, 16, 64)
	if err != nil {
		return false, fmt.Errorf("confine: /proc/%d/status CapBnd %q: %w", pid, capBnd, err)
	}
	return nnp == "1" && seccomp == "2" && bnd == 0, nil
}

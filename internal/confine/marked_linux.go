package confine

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Marked reports whether process pid carries the marks of a process this
// package confined with a seccomp deny-list: no_new_privs and a seccomp
// filter. Both are irreversible and inherited by every descendant, orphaned
// or not, and neither comes back in a new user namespace — unlike the empty
// capability bounding set, which `unshare -U` fills again and which this
// check therefore does not read — so a host can refuse its own API to
// everything it confined, however it forked.
func Marked(pid int) (bool, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, err
	}
	defer f.Close()
	var nnp, seccomp string
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
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if nnp == "" || seccomp == "" {
		return false, fmt.Errorf("confine: /proc/%d/status lacks NoNewPrivs or Seccomp", pid)
	}
	return nnp == "1" && seccomp == "2", nil
}

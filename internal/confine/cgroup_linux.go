package confine

import (
	"bufio"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroup2Mount returns the first cgroup2 mount this process may write to.
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) < 5 {
			continue
		}
		if mnt := fields[4]; unix.Access(mnt, unix.W_OK) == nil {
			return mnt
		}
	}
	return ""
}

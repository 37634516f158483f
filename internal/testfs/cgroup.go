package testfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// StaleCgroup makes the cgroup dir (and its parents) a dead daemon would
// have left and moves pid into it. Test processes of other packages sweep
// the same parents, and one may remove the cgroup while it is still empty,
// between the mkdir and the join: it is made again then, at most 10 times.
// Once pid is in it, any sweep removes it only by ending pid, as the
// sweep under test must.
func StaleCgroup(t testing.TB, dir string, pid int) {
	t.Helper()
	for try := 1; ; try++ {
		err := os.MkdirAll(dir, 0o755)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
		if err == nil {
			return
		}
		if !errors.Is(err, os.ErrNotExist) || try == 10 {
			t.Fatalf("stale cgroup %s: %v", dir, err)
		}
	}
}

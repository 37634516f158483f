package datadir

import (
	"fmt"
	"syscall"
)

// Open files the daemon needs: a running task holds about 6 in the daemon
// (its plugin's stdio pipes, the gRPC connection, the broker's), measured
// with 1,000 tasks in flight (docs/operations.md, "Concurrency"), and the
// store, the API, the logs and the rest need a few hundred.
const (
	filesPerTask  = 8
	filesBaseline = 512
)

// ensureOpenFiles raises the daemon's RLIMIT_NOFILE to what maxConcurrent
// running tasks need, up to its hard limit, and the hard limit too where the
// daemon may (root, CAP_SYS_RESOURCE). A limit that stays short is refused,
// naming both numbers: such a daemon would fail tasks with EMFILE well
// before its max_concurrent. The Go runtime already raised the soft limit
// to the hard one at start (and restores the original in children); a limit
// that suffices is left alone, so plugins inherit what they always did
// (their own comes from confinement.max_open_files).
func ensureOpenFiles(maxConcurrent int) error {
	need := uint64(filesBaseline + filesPerTask*max(maxConcurrent, 0))
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur >= need {
		return nil
	}
	want := syscall.Rlimit{Cur: need, Max: max(lim.Max, need)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
		return nil
	}
	if lim.Max >= need {
		want.Max = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			return nil
		}
	}
	return fmt.Errorf("tasks.max_concurrent = %d needs %d open files, but the daemon's RLIMIT_NOFILE is %d (hard %d) and it may not raise it: "+
		"raise the limit (systemd: LimitNOFILE=%d) or lower tasks.max_concurrent", maxConcurrent, need, lim.Cur, lim.Max, need)
}

package datadir

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// A daemon whose soft RLIMIT_NOFILE is short of what tasks.max_concurrent
// needs raises it at open (here from 64, in a child process so that this
// one's limit and what its children inherit stay as they were); one whose
// limit suffices is left alone.
func TestEnsureOpenFilesRaisesTheLimit(t *testing.T) {
	if os.Getenv("TASKHOST_NOFILE_CHILD") == "1" {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		need := uint64(filesBaseline + filesPerTask*1000)
		if lim.Max < need {
			t.Skipf("hard RLIMIT_NOFILE %d < %d", lim.Max, need)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: lim.Max}); err != nil {
			t.Fatal(err)
		}
		if err := ensureOpenFiles(2); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur != filesBaseline+filesPerTask*2 {
			t.Fatalf("after ensureOpenFiles(2) from 64: soft limit %d (%v), want %d", lim.Cur, err, filesBaseline+filesPerTask*2)
		}
		if err := ensureOpenFiles(1000); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur != need {
			t.Fatalf("after ensureOpenFiles(1000): soft limit %d (%v), want %d", lim.Cur, err, need)
		}
		before := lim
		if err := ensureOpenFiles(10); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim != before {
			t.Fatalf("a sufficient limit changed: %+v → %+v (%v)", before, lim, err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnsureOpenFilesRaisesTheLimit$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TASKHOST_NOFILE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("child (%s):\n%s", strconv.Quote(os.Args[0]), out)
	}
}

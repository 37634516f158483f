// Package testwait is how tests wait for what another goroutine or process
// does: poll with a deadline, never sleep a fixed time and hope.
package testwait

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Until polls cond until it holds, failing the test after d with what it
// was waiting for.
func Until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ReadLive reads path, an absolute path, as it is in this process's mount
// namespace or, failing that, in any other process's: a running shell.run
// command's writes to its workspace are in a mount namespace of its own
// until it ends (host/tools/disk.go), which /proc/PID/root of any of its
// processes shows.
func ReadLive(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, perr := strconv.Atoi(e.Name()); perr != nil {
			continue
		}
		if b, lerr := os.ReadFile("/proc/" + e.Name() + "/root" + path); lerr == nil {
			return b, nil
		}
	}
	return nil, err
}

// File waits up to 15 s for path to exist with some content, and returns
// the content.
func File(t testing.TB, path string) string {
	t.Helper()
	var data []byte
	Until(t, 15*time.Second, "file "+path, func() bool {
		var err error
		data, err = ReadLive(path)
		return err == nil && len(data) > 0
	})
	return string(data)
}

// ShortTempDir is a temp dir short enough for unix socket paths (at most
// 107 bytes), which t.TempDir's long names can overflow; removed at the
// test's end.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "th")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

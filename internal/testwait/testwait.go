// Package testwait is how tests wait for what another goroutine or process
// does: poll with a deadline, never sleep a fixed time and hope.
package testwait

import (
	"os"
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

// File waits up to 15 s for path to exist with some content, and returns
// the content.
func File(t testing.TB, path string) string {
	t.Helper()
	var data []byte
	Until(t, 15*time.Second, "file "+path, func() bool {
		var err error
		data, err = os.ReadFile(path)
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

// PluginDir is a ShortTempDir any uid may write (0777, under the 1777 temp
// dir): where a test lets a plugin leave its pid and marker files, for a
// root daemon runs every plugin under a uid of its own pool, which reaches
// a path only through its "others" mode bits.
func PluginDir(t testing.TB) string {
	t.Helper()
	dir := ShortTempDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Package testwait is how tests wait for what another goroutine or process
// does: poll with a deadline, never sleep a fixed time and hope.
package testwait

import (
	"os"
	"path/filepath"
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

// WriteLive writes path, an absolute path, in this process's mount
// namespace and wherever another process sees a different directory at
// path's directory (/proc/PID/root/...): a running shell.run command sees
// its workspace through an overlay that does not show a file made beneath
// it after it looked (host/tools/disk.go), so a test that releases a
// running command writes the file into the command's own view too.
func WriteLive(path string, data []byte, perm os.FileMode) error {
	if err := os.WriteFile(path, data, perm); err != nil {
		return err
	}
	return liveViews(path, func(there string) { _ = os.WriteFile(there, data, perm) })
}

// RemoveLive removes path, an absolute path, in this process's mount
// namespace and in every other process's view of it where that is another
// directory (see WriteLive): a file a running command made is in its own
// view only until the command ends, and would come back then. A path
// missing everywhere is no error.
func RemoveLive(path string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return liveViews(path, func(there string) { _ = os.Remove(there) })
}

// liveViews calls f with path as each other process that sees another
// directory at path's directory sees it (/proc/PID/root/path).
func liveViews(path string, f func(there string)) error {
	dir, name := filepath.Split(path)
	here, err := os.Stat(dir)
	if err != nil {
		return err
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, perr := strconv.Atoi(e.Name()); perr != nil {
			continue
		}
		there := "/proc/" + e.Name() + "/root" + dir
		if fi, err := os.Stat(there); err == nil && !os.SameFile(fi, here) {
			f(filepath.Join(there, name)) // the process may be gone already
		}
	}
	return nil
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

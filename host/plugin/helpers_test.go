package plugin

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/testbin"
)

// testexecDir builds the test executor the first time a test needs it:
// the adapter's and the log forwarder's tests run without it.
var testexecDir = testbin.Lazy("thpl", testbin.Executor("testexec", testbin.Testexec))

// testexecBuilt says testexecDir ran, so TestMain removes its dir.
var testexecBuilt atomic.Bool

// testexecBin is the test executor's path, built on first use.
func testexecBin(tb testing.TB) string {
	tb.Helper()
	dir, err := testexecDir()
	testexecBuilt.Store(true)
	if err != nil {
		tb.Fatalf("build the test executor: %v", err)
	}
	return filepath.Join(dir, "taskhost-executor-testexec")
}

func TestMain(m *testing.M) {
	// The test binary is the plugins' trampoline.
	confine.Main()
	code := m.Run()
	if testexecBuilt.Load() {
		if dir, err := testexecDir(); err == nil {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// shortTempDir is a temp dir short enough for unix socket paths, which
// t.TempDir's long names can overflow.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "th")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// eventually polls cond until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFile waits for path to exist and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var data []byte
	eventually(t, 15*time.Second, "file "+path, func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil && len(data) > 0
	})
	return string(data)
}

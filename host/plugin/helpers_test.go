package plugin

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

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
	if trampolinesBuilt.Load() {
		if dir, err := trampolines(); err == nil {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

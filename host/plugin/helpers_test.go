package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/testbin"
)

// testexecBin is the test executor, built once for the package.
var testexecBin string

func TestMain(m *testing.M) {
	// The test binary is the plugins' trampoline.
	confine.Main()
	dir, err := testbin.TempDir(context.Background(), "thpl", testbin.Executor("testexec", testbin.Testexec))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testexecBin = filepath.Join(dir, "taskhost-executor-testexec")
	code := m.Run()
	os.RemoveAll(dir)
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

package datadir

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/confine"
)

func TestMain(m *testing.M) {
	// The test binary is the plugins' trampoline where a test starts one.
	confine.Main()
	os.Exit(m.Run())
}

const alice = "alice"

// testConfig is the default config as the host's tests use it: confinement
// required where the kernel can give it.
func testConfig(tb testing.TB) config.Config {
	tb.Helper()
	c := config.Default()
	c.Confinement.Required = confine.Probe().LandlockABI >= 1
	c.Tasks.MaxConcurrent = 16
	return c
}

// fakeExecutorDir is an executor dir naming the shipped kinds and the test
// executor: empty files, enough for the specs, which only read names.
func fakeExecutorDir(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, kind := range []string{"testexec", config.ExecutorLegacy, config.ExecutorMachineSpirit} {
		if err := os.WriteFile(filepath.Join(dir, ExecutorPrefix+kind), nil, 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// openBareDir opens dir with no executors (they play no part in data dir
// checks and would only slow every case down) and closes it at the end of
// the test.
func openBareDir(t *testing.T, dir string) *Dir {
	t.Helper()
	d, err := tryOpen(t, dir)
	if err != nil {
		t.Fatalf("open data dir %s: %v", dir, err)
	}
	return d
}

// tryOpen opens dir as openBareDir does, returning Open's error.
func tryOpen(t *testing.T, dir string) (*Dir, error) {
	t.Helper()
	d, err := Open(context.Background(), Options{DataDir: dir, Config: testConfig(t), ExecutorDir: t.TempDir()})
	if err == nil {
		t.Cleanup(func() { d.Close() })
	}
	return d, err
}

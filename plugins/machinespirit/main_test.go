package machinespirit

import (
	"os"
	"testing"

	"github.com/taskhost/taskhost/internal/confine"
)

// TestMain lets the test binary serve as the workers' trampoline: the
// executor re-executes os.Executable() to confine each worker.
func TestMain(m *testing.M) {
	confine.Main()
	os.Exit(m.Run())
}

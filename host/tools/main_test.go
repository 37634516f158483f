package tools

import (
	"os"
	"testing"

	"github.com/taskhost/taskhost/internal/confine"
)

// TestMain lets the test binary be the trampoline shell.run commands start
// through, as the taskhost binary is in production.
func TestMain(m *testing.M) {
	confine.Main()
	os.Exit(m.Run())
}

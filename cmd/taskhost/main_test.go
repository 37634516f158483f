package main

import (
	"os"
	"testing"

	"github.com/taskhost/taskhost/internal/confine"
)

// TestMain lets the test binary serve as the plugins' trampoline: the
// in-process demo and run commands start plugins through os.Executable().
func TestMain(m *testing.M) {
	confine.Main()
	os.Exit(m.Run())
}

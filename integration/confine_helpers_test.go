package integration

import (
	"fmt"
	"path/filepath"
	"testing"
)

// testexecConfig writes a config into work that lets the confined test
// executor write its pid, marker and env files under work — the one path
// outside its private dir it may write (plugins are confined: the test
// executor is no exception).
func testexecConfig(t *testing.T, work string) string {
	t.Helper()
	return writeConfig(t, work, fmt.Sprintf("[executors.testexec]\npath = %q\nread_write = [%q]\n",
		filepath.Join(binDir, "taskhost-executor-testexec"), work))
}

package python_test

import (
	"os/exec"
	"testing"
)

// TestPythonUnit runs the SDK's Python unit tests (tests/test_sdk.py)
// under the interpreter the SDK supports.
func TestPythonUnit(t *testing.T) {
	needPython(t)
	cmd := exec.Command(python, "-B", "-m", "unittest", "discover", "-v", "-s", "tests")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

package machinespirit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestSweepRuntimeDirs: the dir of a plugin that is gone is removed, the
// dir of a live one is not.
func TestSweepRuntimeDirs(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(os.TempDir(), runtimeDirPrefix+strconv.Itoa(cmd.Process.Pid)+"-sweeptest")
	live := filepath.Join(os.TempDir(), runtimeDirPrefix+"1-sweeptest") // init never dies
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.RemoveAll(dead); _ = os.RemoveAll(live) })
	sweepRuntimeDirs(hclog.NewNullLogger())
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead plugin's dir is still there: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("the live plugin's dir was removed: %v", err)
	}
}

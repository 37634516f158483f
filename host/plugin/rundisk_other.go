//go:build !linux

package plugin

import "os"

// Without Linux there is no tmpfs to bound a run dir with.
func mountRunDisk(string, int64) (bool, error) { return false, nil }

func removeRunDir(dir string) {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

func RunDirPrefix(string) string { return "taskhost-plugin-" }

// SweepRunDirs removes nothing: no run dir is a mount here.
func SweepRunDirs(string) int { return 0 }

//go:build !linux

package confine

import (
	"errors"
	"os"
)

// Main returns at once: confinement exists only on Linux.
func Main() {}

func landlockABI() int       { return 0 }
func seccompSupported() bool { return false }
func cgroup2Mount() string   { return "" }

func fileID(*os.File) (uint64, uint64, error) {
	return 0, 0, errors.New("confinement needs Linux")
}

// Marked is always false: nothing is confined off Linux.
func Marked(int) (bool, error) { return false, nil }

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

func dirID(*os.File) (uint64, uint64, error) {
	return 0, 0, errors.New("confinement needs Linux")
}

// OverlayUpperDir is the upper directory's name in a NewOverlayUpper tmpfs.
const OverlayUpperDir = "upper"

// NewOverlayUpper fails: overlays need Linux.
func NewOverlayUpper(int64, int, int, int, uint32) (*os.File, error) {
	return nil, errors.New("confine: an overlay needs Linux")
}

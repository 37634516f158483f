package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/taskhost/taskhost/host"
)

// maxFileFlagBytes bounds one --file; the host bounds all of them together.
const maxFileFlagBytes = 16 << 20

// fileFlags collects --file PATH[=NAME] flags: files copied into a new
// task's workspace, e.g. the context a machinespirit rlm task reads.
type fileFlags struct{ files []host.File }

func (f *fileFlags) String() string { return "" }

func (f *fileFlags) Set(v string) error {
	src, name, ok := strings.Cut(v, "=")
	if !ok {
		name = filepath.Base(src)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	if fi.Size() > maxFileFlagBytes {
		return fmt.Errorf("%s is %d bytes, limit %d", src, fi.Size(), maxFileFlagBytes)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	f.files = append(f.files, host.File{Name: filepath.ToSlash(name), Data: data})
	return nil
}

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/taskhost/taskhost/host"
)

// Bounds of the files a command reads.
const (
	// maxFileFlagBytes bounds one --file; the host bounds all of them
	// together.
	maxFileFlagBytes = 16 << 20
	// maxSpecFileBytes bounds --spec-file: the API takes a spec of at most
	// 64 KiB.
	maxSpecFileBytes = 64 << 10
)

// readInputFile reads the regular file path for flag, at most limit bytes.
// Anything else — a device such as /dev/zero, a FIFO, a socket, a
// directory — is refused before a byte is read, and the size is enforced
// while reading (the file may grow after it was looked at). It is opened
// non-blocking, so a FIFO put in its place cannot block the open.
func readInputFile(flag, path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s: is %s, not a regular file: give a file's path", flag, path, fileKind(fi.Mode()))
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s %s: is %d bytes, the limit is %d", flag, path, fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s %s: is more than %d bytes, the limit", flag, path, limit)
	}
	return data, nil
}

// fileKind names what a non-regular file is, for an error.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file"
}

// fileFlags collects --file PATH[=NAME] flags: files copied into a new
// task's workspace, e.g. the context a machinespirit rlm task reads.
type fileFlags struct{ files []host.File }

func (f *fileFlags) String() string { return "" }

func (f *fileFlags) Set(v string) error {
	src, name, ok := strings.Cut(v, "=")
	if !ok {
		name = filepath.Base(src)
	}
	if src == "" {
		return errors.New("want PATH or PATH=NAME")
	}
	data, err := readInputFile("--file", src, maxFileFlagBytes)
	if err != nil {
		return err
	}
	f.files = append(f.files, host.File{Name: filepath.ToSlash(name), Data: data})
	return nil
}

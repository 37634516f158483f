package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
)

// Bounds of a workspace listing for export: one gRPC message must hold it.
const (
	MaxExportEntries   = 10000
	MaxExportListBytes = 2 << 20 // the paths of a listing together
)

// ErrExportPath matches every refusal of a path to export (errors.Is); the
// *ExportPathError says which path and why.
var ErrExportPath = errors.New("path refused")

// ExportPathError is a path that cannot be exported: malformed, leading
// out of the workspace, through or to a symlink, or of the wrong type.
type ExportPathError struct {
	Path, Message string
}

func (e *ExportPathError) Error() string {
	p := e.Path
	if len(p) > maxShownPath {
		p = p[:maxShownPath] + "..."
	}
	return fmt.Sprintf("path %q %s", p, e.Message)
}

// Is makes errors.Is(err, ErrExportPath) hold.
func (e *ExportPathError) Is(t error) bool { return t == ErrExportPath }

// maxShownPath bounds how much of a refused path an error repeats.
const maxShownPath = 100

func refusePath(p, format string, a ...any) error {
	return &ExportPathError{Path: p, Message: fmt.Sprintf(format, a...)}
}

// ExportEntry is one entry of a workspace listing.
type ExportEntry struct {
	Path     string // relative to the workspace, slash-separated
	Type     string // file, dir, symlink or other
	Size     int64  // bytes, for files
	Modified time.Time
}

// openExport opens the workspace of taskID under workspaceRoot for reading
// and checks p (a relative path, "" or "." for the workspace) so that
// neither it nor any directory on the way is a symlink. The workspace
// directory itself must not be a symlink either. The Root keeps every
// later operation inside the workspace even if the tree changes after the
// check. A workspace that does not exist is fs.ErrNotExist.
func openExport(workspaceRoot, taskID, p string) (*os.Root, string, error) {
	rel := "."
	if p != "" && p != "." {
		var err error
		if rel, err = cleanPath(p); err != nil {
			return nil, "", refusePath(p, "%v", err)
		}
	}
	parent, err := os.OpenRoot(workspaceRoot)
	if err != nil {
		return nil, "", err
	}
	defer parent.Close()
	fi, err := parent.Lstat(taskID)
	if err != nil {
		return nil, "", err
	}
	if !fi.IsDir() {
		return nil, "", fmt.Errorf("workspace %s is not a directory (%s)", taskID, fi.Mode().Type())
	}
	root, err := parent.OpenRoot(taskID)
	if err != nil {
		return nil, "", err
	}
	if rel == "." {
		return root, rel, nil
	}
	cur := ""
	for seg := range strings.SplitSeq(rel, "/") {
		cur = path.Join(cur, seg)
		fi, err := root.Lstat(cur)
		if err != nil {
			root.Close()
			return nil, "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			root.Close()
			if cur == rel {
				return nil, "", refusePath(p, "is a symlink: symlinks are not exported")
			}
			return nil, "", refusePath(p, "goes through the symlink %q: symlinks are not followed", cur)
		}
	}
	return root, rel, nil
}

// ListExport lists the entries under directory p of the workspace of
// taskID, depth first in path order, without following symlinks. It stops
// at MaxExportEntries entries or MaxExportListBytes of paths and then
// reports truncated. A missing workspace lists as empty.
func ListExport(ctx context.Context, workspaceRoot, taskID, p string) ([]ExportEntry, bool, error) {
	return listExport(ctx, workspaceRoot, taskID, p, MaxExportEntries, MaxExportListBytes)
}

func listExport(ctx context.Context, workspaceRoot, taskID, p string, maxEntries, maxBytes int) (entries []ExportEntry, truncated bool, err error) {
	root, rel, err := openExport(workspaceRoot, taskID, p)
	if errors.Is(err, fs.ErrNotExist) && (p == "" || p == ".") {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer root.Close()
	fi, err := root.Lstat(rel)
	if err != nil {
		return nil, false, err
	}
	if !fi.IsDir() {
		return nil, false, refusePath(p, "is not a directory")
	}
	bytes := 0
	err = fs.WalkDir(root.FS(), rel, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == rel {
			return nil
		}
		if len(entries) == maxEntries || bytes+len(name) > maxBytes {
			truncated = true
			return fs.SkipAll
		}
		e := ExportEntry{Path: name, Type: "other"}
		switch t := d.Type(); {
		case t.IsRegular():
			e.Type = "file"
		case t.IsDir():
			e.Type = "dir"
		case t&fs.ModeSymlink != 0:
			e.Type = "symlink"
		}
		if info, err := d.Info(); err == nil {
			e.Modified = info.ModTime()
			if e.Type == "file" {
				e.Size = info.Size()
			}
		}
		bytes += len(name)
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return entries, truncated, nil
}

// OpenExport opens the regular file p of the workspace of taskID for
// reading. A symlink at p or on the way to it, a directory or any other
// non-regular file is an *ExportPathError; the caller closes the file.
func OpenExport(workspaceRoot, taskID, p string) (*os.File, fs.FileInfo, error) {
	if p == "" || p == "." {
		return nil, nil, refusePath(p, "is the workspace itself: give a file's path")
	}
	root, rel, err := openExport(workspaceRoot, taskID, p)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	// O_NOFOLLOW: a symlink swapped in after the check is refused too;
	// O_NONBLOCK: a FIFO cannot block the open.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, refusePath(p, "is a symlink: symlinks are not exported")
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		if fi.IsDir() {
			return nil, nil, refusePath(p, "is a directory: list it instead")
		}
		return nil, nil, refusePath(p, "is not a regular file (%s)", fi.Mode().Type())
	}
	return f, fi, nil
}

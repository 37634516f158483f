package host

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/taskhost/taskhost/host/plugin"
)

// Limits of the files a task creator seeds into the task's workspace.
const (
	maxSeedFiles = 16
	maxSeedBytes = 16 << 20 // all files together
	maxSeedName  = 255
)

// File is a file to place in a new task's workspace before its first step,
// e.g. the context an executor reads through workspace.read.
type File struct {
	Name string // relative, slash-separated, no ".." segment
	Data []byte
}

func validateFiles(files []File) error {
	if len(files) > maxSeedFiles {
		return &plugin.FieldError{Field: "files", Message: fmt.Sprintf("%d files, limit %d", len(files), maxSeedFiles)}
	}
	total := 0
	seen := map[string]bool{}
	for i, f := range files {
		field := fmt.Sprintf("files[%d].name", i)
		clean := path.Clean(f.Name)
		switch {
		case f.Name == "" || len(f.Name) > maxSeedName:
			return &plugin.FieldError{Field: field, Message: fmt.Sprintf("must be 1..%d bytes", maxSeedName)}
		case path.IsAbs(f.Name) || clean != f.Name || clean == "." || strings.HasPrefix(clean, "../") || clean == ".." || strings.ContainsRune(f.Name, 0):
			return &plugin.FieldError{Field: field, Message: fmt.Sprintf("%q must be a clean relative path inside the workspace", f.Name)}
		case seen[clean]:
			return &plugin.FieldError{Field: field, Message: fmt.Sprintf("%q given twice", f.Name)}
		}
		seen[clean] = true
		total += len(f.Data)
	}
	if total > maxSeedBytes {
		return &plugin.FieldError{Field: "files", Message: fmt.Sprintf("%d bytes in all, limit %d", total, maxSeedBytes)}
	}
	return nil
}

// seedWorkspace writes files into a new task's workspace. os.Root keeps
// every write inside it.
func (r *Runner) seedWorkspace(taskID string, files []File) error {
	if len(files) == 0 {
		return nil
	}
	dir := r.workspace(taskID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	defer root.Close()
	for _, f := range files {
		if d := filepath.Dir(filepath.FromSlash(f.Name)); d != "." {
			if err := root.MkdirAll(d, 0o700); err != nil {
				return fmt.Errorf("workspace: %w", err)
			}
		}
		if err := root.WriteFile(filepath.FromSlash(f.Name), f.Data, 0o600); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	return nil
}

package testbin

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// PythonSDK copies the Python SDK (sdk/python's .py files: the package, its
// example and test executors) and its generated protocol code
// (shared/proto/python) from the repository at root into dst, laid out as
// in the repository, dirs 0755 and files 0644. Tests run the copy: a root
// daemon runs each plugin under a uid of its own, which reaches read_only
// paths through their "others" mode bits only, whatever the checkout's
// modes are.
func PythonSDK(root, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("testbin: %w", err)
	}
	for _, sub := range []string{filepath.Join("sdk", "python"), filepath.Join("shared", "proto", "python")} {
		err := filepath.WalkDir(filepath.Join(root, sub), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".py") {
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out := filepath.Join(dst, rel)
			if err := mkdirAll(dst, filepath.Dir(rel)); err != nil {
				return err
			}
			if err := os.WriteFile(out, data, 0o644); err != nil {
				return err
			}
			return os.Chmod(out, 0o644) // past the umask
		})
		if err != nil {
			return fmt.Errorf("testbin: copy the Python SDK: %w", err)
		}
	}
	return nil
}

// mkdirAll makes each dir of rel under base 0755, past the umask.
func mkdirAll(base, rel string) error {
	dir := base
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
	}
	return os.Chmod(base, 0o755)
}

package tools

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzWorkspacePath feeds arbitrary path arguments to the path resolver
// (cleanPath, then resolve) in a workspace full of symlinks, some leading
// out. Whatever it accepts must stay in the workspace: the resolved path is
// local, and what opening it through the workspace Root reaches is under
// the workspace's real directory.
func FuzzWorkspacePath(f *testing.F) {
	for _, seed := range []string{
		"a.txt", "sub/file", ".", "./", "sub/../x", "../x", "..", "/etc/passwd", "a\x00b",
		"outdir", "outdir/secret", "outfile", "up", "up/x", "sub/up", "sub/up/x", "chain",
		"loop", "inlink", "abs_in", "abs_out", "dirlink/file", "dirlink/../file", "sub//file/",
		strings.Repeat("a/", 300),
	} {
		f.Add(seed)
	}
	base := f.TempDir()
	ws := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(ws, "sub"), outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			f.Fatal(err)
		}
	}
	for name, data := range map[string]string{
		filepath.Join(ws, "a.txt"):       "a",
		filepath.Join(ws, "sub", "file"): "f",
		filepath.Join(outside, "secret"): "s",
	} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"outdir":      outside,
		"outfile":     filepath.Join(outside, "secret"),
		"up":          "..",
		"sub/up":      "../..",
		"chain":       "outfile",
		"loop":        "loop",
		"inlink":      "a.txt",
		"abs_in":      filepath.Join(ws, "sub"),
		"abs_out":     "/",
		"dirlink":     "sub",
		"sub/sibling": "../a.txt",
	} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			f.Fatal(err)
		}
	}
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		f.Fatal(err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { root.Close() })

	f.Fuzz(func(t *testing.T, p string) {
		rel, err := cleanPath(p)
		if err != nil {
			return
		}
		if !filepath.IsLocal(rel) && rel != "." {
			t.Fatalf("cleanPath(%q) = %q, not local", p, rel)
		}
		res, err := resolve(root, []string{ws, realWS}, rel)
		if err != nil {
			if !errors.Is(err, errEscapes) && !errors.Is(err, errSymlinkLoop) && !errors.Is(err, os.ErrNotExist) &&
				!strings.Contains(err.Error(), "not a directory") && !strings.Contains(err.Error(), "file name too long") {
				t.Fatalf("resolve(%q): unexpected error %v", rel, err)
			}
			return
		}
		if res != "." && (!filepath.IsLocal(res) || strings.Contains("/"+res+"/", "/../")) {
			t.Fatalf("resolve(%q) = %q, not local", rel, res)
		}
		full := filepath.Join(ws, res)
		if full != ws && !strings.HasPrefix(full, ws+"/") {
			t.Fatalf("resolve(%q) = %q, outside %s", rel, res, ws)
		}
		// What it names, if it exists, is under the real workspace.
		file, err := root.Open(res)
		if err != nil {
			return
		}
		defer file.Close()
		got, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(file.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		if got != realWS && !strings.HasPrefix(got, realWS+"/") {
			t.Fatalf("path %q resolved to %q, which opens %s outside %s", p, res, got, realWS)
		}
	})
}

// FuzzSummarize: a summary is always bounded, whatever the input.
func FuzzSummarize(f *testing.F) {
	f.Add(ToolShellRun, `{"command":"ls"}`)
	f.Add("x\xff", `{"a":`)
	f.Fuzz(func(t *testing.T, name, args string) {
		if s := Summarize(name, json.RawMessage(args)); len(s) > MaxSummaryBytes {
			t.Fatalf("summary of %d bytes", len(s))
		}
	})
}

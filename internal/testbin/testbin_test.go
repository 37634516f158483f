package testbin

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeModule makes a throwaway module with main packages a and b, so the
// builds under test are small and do not depend on the project's state.
func writeModule(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":    "module example.com/m\n\ngo 1.26\n",
		"a/main.go": "package main\n\nvar v = \"default\"\n\nfunc main() { println(v) }\n",
		"b/main.go": "package main\n\nfunc main() {}\n",
		// os/user takes cgo where a C toolchain is: a dynamic binary
		// unless built with CGO_ENABLED=0.
		"c/main.go": "package main\n\nimport \"os/user\"\n\nfunc main() { user.Current() }\n",
		"bad/x.go":  "package main\n\nfunc main() { undefined() }\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	return dir
}

func TestBuildAll(t *testing.T) {
	writeModule(t)
	out := t.TempDir()
	err := BuildAll(context.Background(), out,
		Build{Package: "example.com/m/a"},
		Build{Package: "example.com/m/b"},
		Build{Name: "renamed", Package: "example.com/m/b"},
		Build{Name: "flagged", Package: "example.com/m/a", LDFlags: "-X main.v=set"},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "renamed", "flagged"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Mode()&0o100 == 0 {
			t.Errorf("%s: %v (mode %v), want an executable", name, err, fi)
		}
	}
	got, err := exec.Command(filepath.Join(out, "flagged")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "set" {
		t.Errorf("flagged printed %q (%v), want the -ldflags value", got, err)
	}
}

func TestBuildAllRefuses(t *testing.T) {
	writeModule(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		builds []Build
		want   string
	}{
		{"nothing", nil, "nothing to build"},
		{"no package", []Build{{Name: "x"}}, `build "x" has no package`},
		{"same file twice", []Build{{Package: "example.com/m/a"}, {Name: "a", Package: "example.com/m/b"}}, "two builds write a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := BuildAll(ctx, t.TempDir(), tc.builds...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	err := BuildAll(ctx, t.TempDir(), Build{Package: "example.com/m/bad"})
	var be *Error
	if !errors.As(err, &be) || !strings.Contains(be.Output, "undefined") {
		t.Fatalf("err = %v, want an *Error carrying the compiler's output", err)
	}
}

func TestLazyBuildsOnce(t *testing.T) {
	writeModule(t)
	dir := Lazy("tb", Build{Package: "example.com/m/b"})
	first, err := dir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(first) })
	if err := os.Remove(filepath.Join(first, "b")); err != nil {
		t.Fatal(err)
	}
	// A second call returns the same directory without building again.
	second, err := dir()
	if err != nil || second != first {
		t.Fatalf("second call = %q, %v; want %q", second, err, first)
	}
	if _, err := os.Stat(filepath.Join(second, "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("binary rebuilt on the second call: %v", err)
	}
}

// The copy of the Python SDK holds the package and the generated code,
// readable by every uid, and no byte-code cache.
func TestPythonSDK(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "py")
	if err := PythonSDK(filepath.Join("..", ".."), dst); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{
		"sdk": 0o755, "sdk/python/taskhost_executor": 0o755, "shared/proto/python": 0o755,
		"sdk/python/taskhost_executor/__init__.py": 0o644, "sdk/python/examples/pynotes.py": 0o644,
		"shared/proto/python/executor_pb2.py": 0o644,
	} {
		fi, err := os.Stat(filepath.Join(dst, path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), mode)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "sdk/python/taskhost_executor/__pycache__")); err == nil {
		t.Error("the byte-code cache was copied")
	}
}

// What a task starts is built as a release builds it: statically linked,
// with no dynamic loader (no PT_INTERP), even a package that would take
// cgo.
func TestBuildAllLinksStatically(t *testing.T) {
	writeModule(t)
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Skipf("cgo is off here (go env CGO_ENABLED: %q, %v): every build is static whatever BuildAll does", out, err)
	}
	out := t.TempDir()
	if err := BuildAll(context.Background(), out, Build{Package: "example.com/m/c"}, Build{Name: "flagged", Package: "example.com/m/c", LDFlags: "-s"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"c", "flagged"} {
		f, err := elf.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a dynamic loader (PT_INTERP): built with cgo", name)
			}
		}
		f.Close()
	}
}

// Package testbin builds the project's binaries for tests: one place for
// the import paths and the `go build` invocations that test packages
// otherwise each repeat. It imports nothing of the project.
package testbin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// Import paths of the binaries tests run.
const (
	Taskhost      = "github.com/taskhost/taskhost/cmd/taskhost"
	Confine       = "github.com/taskhost/taskhost/cmd/taskhost-confine"
	Testexec      = "github.com/taskhost/taskhost/integration/testexec"
	Hostileexec   = "github.com/taskhost/taskhost/integration/hostileexec"
	Legacy        = "github.com/taskhost/taskhost/plugins/legacy/cmd/taskhost-executor-legacy"
	MachineSpirit = "github.com/taskhost/taskhost/plugins/machinespirit/cmd/taskhost-executor-machinespirit"
)

// Build is one binary to build.
type Build struct {
	// Name is the file name in the output directory; empty means the
	// last element of Package, as `go build` names it.
	Name    string
	Package string
	// LDFlags, when set, is passed as -ldflags (e.g. "-X main.v=1").
	LDFlags string
}

func (b Build) name() string {
	if b.Name != "" {
		return b.Name
	}
	return path.Base(b.Package)
}

// Executor is the build of an executor package under the file name the
// host looks for, taskhost-executor-<kind>.
func Executor(kind, pkg string) Build {
	return Build{Name: "taskhost-executor-" + kind, Package: pkg}
}

// Error is a failed build, with what the go command printed.
type Error struct {
	Args   []string
	Output string
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("go %s: %v\n%s", strings.Join(e.Args, " "), e.Err, e.Output)
}

func (e *Error) Unwrap() error { return e.Err }

// static says whether pkg is built as the Makefile builds it for a
// release: everything but the daemon, which every task starts, statically
// linked (CGO_ENABLED=0).
func static(pkg string) bool { return pkg != Taskhost }

// BuildAll builds bs into dir, which must exist, linked as a release is
// (static). Builds that keep their package's own name and have no flags
// share one go command per linking, which builds them in parallel; each
// other one is a go command of its own.
func BuildAll(ctx context.Context, dir string, bs ...Build) error {
	if len(bs) == 0 {
		return errors.New("testbin: nothing to build")
	}
	type command struct {
		static bool
		args   []string
	}
	seen := map[string]bool{}
	plain := map[bool][]string{}
	var cmds []command
	for _, b := range bs {
		if b.Package == "" {
			return fmt.Errorf("testbin: build %q has no package", b.Name)
		}
		name := b.name()
		if seen[name] {
			return fmt.Errorf("testbin: two builds write %s", name)
		}
		seen[name] = true
		switch {
		case b.LDFlags != "":
			cmds = append(cmds, command{static(b.Package), []string{"build", "-o", filepath.Join(dir, name), "-ldflags", b.LDFlags, b.Package}})
		case name != path.Base(b.Package):
			cmds = append(cmds, command{static(b.Package), []string{"build", "-o", filepath.Join(dir, name), b.Package}})
		default:
			plain[static(b.Package)] = append(plain[static(b.Package)], b.Package)
		}
	}
	for _, st := range []bool{false, true} {
		if pkgs := plain[st]; len(pkgs) > 0 {
			// The trailing separator makes -o a directory even for one package.
			cmds = append([]command{{st, append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)}}, cmds...)
		}
	}
	for _, c := range cmds {
		cmd := exec.CommandContext(ctx, "go", c.args...)
		if c.static {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return &Error{Args: c.args, Output: string(out), Err: err}
		}
	}
	return nil
}

// TempDir makes a new temporary directory (named after prefix) and builds
// bs into it. On failure it removes the directory. Like an install dir,
// it is 0755: a plugin under a uid of the daemon's pool runs what it
// holds by path (machinespirit's worker trampoline).
func TempDir(ctx context.Context, prefix string, bs ...Build) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("testbin: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("testbin: %w", err)
	}
	if err := BuildAll(ctx, dir, bs...); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Lazy returns a function that builds bs into a new temporary directory the
// first time it is called and returns that directory (or the error) on
// every call: tests that need the binaries pay for them, the others don't.
// The directory outlives the test process's tests; remove it from TestMain
// if it matters.
func Lazy(prefix string, bs ...Build) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		return TempDir(context.Background(), prefix, bs...)
	})
}

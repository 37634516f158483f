package executortest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/text"
)

// buildTimeout bounds the extraction and the build of an old release.
const buildTimeout = 5 * time.Minute

// refRE is what BuildAt accepts as a git ref: a name, a tag or a commit,
// never an option (a leading '-') or a revision expression with spaces.
var refRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./^~@{}-]{0,199}$`)

// BuildAt builds the main package pkg (as `go build` names it, relative to
// the test's working directory, e.g. "./cmd/taskhost-executor-checklist") as it was
// at the git ref ref (a tag, a branch or a commit) of the repository that
// holds the test's working directory, and returns the binary's path, for
// Options.OldBinary:
//
//	old := executortest.BuildAt(t, "v1.2.0", "./cmd/taskhost-executor-checklist")
//	executortest.Run(t, executortest.Options{OldBinary: old, ...})
//
// The repository is exported at ref with `git archive` into a temporary
// directory (the checkout and its worktrees are left alone), and the
// package is built from the module's directory there, so a replace
// directive pointing elsewhere in the repository resolves as it did at ref.
// It fails the test with what to do when the directory is not in a git
// repository, ref is unknown or the build fails.
func BuildAt(t testing.TB, ref, pkg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	bin, err := buildAt(ctx, t.TempDir(), ".", ref, pkg)
	if err != nil {
		t.Fatalf("executortest.BuildAt(%q, %q): %v", ref, pkg, err)
	}
	return bin
}

// buildAt is BuildAt for the module in dir, into tmp.
func buildAt(ctx context.Context, tmp, dir, ref, pkg string) (string, error) {
	if !refRE.MatchString(ref) {
		return "", fmt.Errorf("ref %q is not a git ref name or commit (1 to 200 characters: letters, digits and _ . / ^ ~ @ { } -, not starting with '-')", text.Clip(ref, 64))
	}
	if pkg == "" || strings.HasPrefix(pkg, "-") {
		return "", fmt.Errorf("pkg %q is not a package path such as %q", text.Clip(pkg, 64), "./cmd/taskhost-executor-NAME")
	}
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("git is not on PATH: build the old release yourself and set Options.OldBinary to it: %w", err)
	}
	prefix, err := git(ctx, dir, "rev-parse", "--show-prefix")
	if err != nil {
		return "", fmt.Errorf("%s is not inside a git repository (%w): build the old release yourself and set Options.OldBinary to it", dir, err)
	}
	top, err := git(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	commit, err := git(ctx, top, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("no commit %q in %s: name a tag, branch or commit of an earlier release (git tag --list shows the tags)", ref, top)
	}
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o700); err != nil {
		return "", err
	}
	archive := filepath.Join(tmp, "src.tar")
	if _, err := git(ctx, top, "archive", "--format=tar", "-o", archive, commit); err != nil {
		return "", err
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xf", archive, "-C", src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("extract %s: %w: %s", ref, err, bytes.TrimSpace(out))
	}
	// pkg is relative to dir, so it is built from dir's place in the
	// exported tree.
	modDir := filepath.Join(src, filepath.FromSlash(prefix))
	if _, err := os.Stat(modDir); err != nil {
		return "", fmt.Errorf("%s did not exist at %s (%s): name a ref that has it", prefix, ref, commit[:12])
	}
	bin := filepath.Join(tmp, "old-"+filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = modDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s at %s (%s): %w\n%s", pkg, ref, commit[:12], err, text.Clip(string(out), 4096))
	}
	return bin, nil
}

// git runs git in dir and returns its trimmed stdout.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), errors.New(text.Clip(msg, 512)))
	}
	return strings.TrimSpace(string(out)), nil
}

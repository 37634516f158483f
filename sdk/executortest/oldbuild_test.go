package executortest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/text"
)

func TestBuildAtRefusesBadInput(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git is not on PATH: %v", err)
	}
	notRepo := t.TempDir()
	tests := []struct {
		name, dir, ref, pkg string
		want                string
	}{
		{"option as ref", ".", "--output=/tmp/x", "./internal/flawed", "is not a git ref name"},
		{"empty ref", ".", "", "./internal/flawed", "is not a git ref name"},
		{"ref past its bound", ".", strings.Repeat("a", 201), "./internal/flawed", "1 to 200 characters"},
		{"ref at its bound, unknown", ".", strings.Repeat("a", 200), "./internal/flawed", "no commit"},
		{"unknown ref", ".", "no-such-release-tag", "./internal/flawed", "no commit \"no-such-release-tag\""},
		{"option as pkg", ".", "HEAD", "-toolexec=x", "is not a package path"},
		{"not a repository", notRepo, "HEAD", "./cmd/x", "is not inside a git repository"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := buildAt(context.Background(), t.TempDir(), tt.dir, tt.ref, tt.pkg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("buildAt(%q, %q) = %v, want an error containing %q", text.Clip(tt.ref, 20), tt.pkg, err, tt.want)
			}
		})
	}
}

func TestBuildAtBuildsTheCommittedTree(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds an executor from an exported tree")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git is not on PATH: %v", err)
	}
	if _, err := exec.Command("git", "rev-parse", "--verify", "--quiet", "HEAD^{commit}").Output(); err != nil {
		t.Skipf("not in a git repository with commits: %v", err)
	}
	bin := BuildAt(t, "HEAD", "./internal/flawed")
	if filepath.Base(bin) != "old-flawed" {
		t.Errorf("binary %s, want old-flawed", bin)
	}
	d, err := describeBinary(context.Background(), bin, nil)
	if err != nil {
		t.Fatalf("describe the build of HEAD: %v", err)
	}
	if d.Kind == "" || len(d.CheckpointSchemas) == 0 {
		t.Errorf("the build of HEAD describes itself as %+v", d)
	}
}

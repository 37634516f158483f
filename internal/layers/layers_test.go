package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/taskhost/taskhost"

// Each layer imports, directly or not, nothing above it: the seams and the
// executors' side know no engine, the assembly (host/datadir) no task,
// the engine no API.
func TestImportsGoDownward(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pkg       string
		forbidden []string // import paths, or prefixes ending in "/"
	}{
		{"host", []string{"host/api", "cmd/"}},
		{"host/datadir", []string{"host", "host/api", "cmd/"}},
		{"host/plugin", []string{"host", "host/datadir", "host/api", "cmd/"}},
		{"host/tools", []string{"host", "host/datadir", "host/api", "cmd/"}},
		{"host/model", []string{"host", "host/datadir", "host/api", "cmd/"}},
		{"store", []string{"host", "host/", "cmd/"}},
		{"sdk", []string{"host", "host/", "store", "cmd/"}},
		{"internal/steprpc", []string{"host", "host/", "store", "cmd/"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			t.Parallel()
			for _, dep := range deps(t, tt.pkg) {
				rel, ok := strings.CutPrefix(dep, module+"/")
				if !ok {
					continue
				}
				for _, f := range tt.forbidden {
					if rel == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(rel, f)) {
						t.Errorf("%s imports %s, a layer above it", tt.pkg, rel)
					}
				}
			}
		})
	}
}

// deps lists what pkg imports, directly or not, without its tests.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/"+pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v: %s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", pkg, err)
	}
	var list []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != module+"/"+pkg {
			list = append(list, l)
		}
	}
	return list
}

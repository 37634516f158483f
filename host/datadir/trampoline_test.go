package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindTrampoline(t *testing.T) {
	t.Parallel()
	exe, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skipf("no /bin/true to stand in for a binary: %v", err)
	}
	write := func(t *testing.T, dir string, mode os.FileMode) {
		t.Helper()
		path := filepath.Join(dir, TrampolineName)
		if err := os.WriteFile(path, exe, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		found   bool
		wantErr string
	}{
		{name: "absent", setup: func(*testing.T, string) {}},
		{name: "trusted", setup: func(t *testing.T, dir string) { write(t, dir, 0o755) }, found: true},
		{name: "owner only", setup: func(t *testing.T, dir string) { write(t, dir, 0o700) }, found: true},
		{name: "link to a trusted file", found: true, setup: func(t *testing.T, dir string) {
			other := t.TempDir()
			write(t, other, 0o755)
			if err := os.Symlink(filepath.Join(other, TrampolineName), filepath.Join(dir, TrampolineName)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "group-writable", setup: func(t *testing.T, dir string) { write(t, dir, 0o775) }, wantErr: "writable by group or others"},
		{name: "world-writable", setup: func(t *testing.T, dir string) { write(t, dir, 0o757) }, wantErr: "writable by group or others"},
		{name: "not executable", setup: func(t *testing.T, dir string) { write(t, dir, 0o644) }, wantErr: "not executable"},
		{name: "a directory", wantErr: "not a regular file", setup: func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, TrampolineName), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another user's", wantErr: "owned by uid 65534", setup: func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the file away")
			}
			write(t, dir, 0o755)
			if err := os.Chown(filepath.Join(dir, TrampolineName), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			tr, err := findTrampoline(dir)
			t.Cleanup(func() { tr.close() })
			got := ""
			if tr != nil {
				got = tr.path
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), filepath.Join(dir, TrampolineName)) {
					t.Fatalf("findTrampoline = %q, %v; want an error naming the file and %q", got, err, tt.wantErr)
				}
				if tr != nil {
					t.Fatalf("a refused trampoline came back as %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, TrampolineName); tt.found && got != want || !tt.found && tr != nil {
				t.Fatalf("findTrampoline = %q, found %v", got, tt.found)
			}
			if tr != nil && (len(tr.sha256) != 64 || int(tr.f.Fd()) < trampolineFD) {
				t.Errorf("trampoline %+v: want it hashed and held at fd %d or above", tr, trampolineFD)
			}
		})
	}
}

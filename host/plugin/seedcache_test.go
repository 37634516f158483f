package plugin

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A launch's copy holds the cache's regular files, and nothing a symlink
// or a dot file names; keep takes back only new regular files, within the
// file bound, and never follows a link planted in the copy.
func TestSeedCacheCopyAndKeep(t *testing.T) {
	t.Parallel()
	cache, work := t.TempDir(), t.TempDir()
	write := func(dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(cache, "state-a", "A")
	write(cache, ".tmp-state-b", "half")
	secret := filepath.Join(work, "secret")
	write(work, "secret", "not the cache's")
	if err := os.Symlink(secret, filepath.Join(cache, "state-link")); err != nil {
		t.Fatal(err)
	}
	s, err := newSeedCache(cache, filepath.Join(work, "copy"), os.Geteuid(), os.Getegid())
	if err != nil {
		t.Fatal(err)
	}
	got, err := seedFiles(s.copy)
	if err != nil || len(got) != 1 || got[0] != "state-a" {
		t.Fatalf("copy holds %v (%v), want [state-a]", got, err)
	}
	if fi, err := os.Stat(s.copy); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("copy dir: %v %v, want 0700", fi, err)
	}

	write(s.copy, "state-new", "N")
	if err := os.Symlink(secret, filepath.Join(s.copy, "state-planted-link")); err != nil {
		t.Fatal(err)
	}
	if err := s.keep(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(cache, "state-new")); err != nil || string(b) != "N" {
		t.Fatalf("state-new not kept: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(cache, "state-planted-link")); err == nil {
		t.Fatal("a symlink in the copy reached the cache")
	}

	// At the bound: the cache holds maxSeedFiles files and takes no more.
	for i := 0; i < maxSeedFiles+4; i++ {
		write(s.copy, "state-x"+strconv.Itoa(i), "x")
	}
	if err := s.keep(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	regular := 0
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name()[0] != '.' {
			regular++
		}
	}
	if regular != maxSeedFiles {
		t.Fatalf("cache holds %d files, want the bound %d", regular, maxSeedFiles)
	}
}

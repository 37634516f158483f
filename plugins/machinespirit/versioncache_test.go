package machinespirit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// countingSwipl writes a fake swipl that prints versionLine and appends a
// line to a counter file at each run; runs reports how many there were.
func countingSwipl(t *testing.T, dir, versionLine string) (path string, runs func() int) {
	t.Helper()
	count := filepath.Join(dir, "runs")
	path = filepath.Join(dir, "swipl")
	writeCountingSwipl(t, path, count, versionLine)
	return path, func() int {
		t.Helper()
		b, err := os.ReadFile(count)
		if os.IsNotExist(err) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
}

func writeCountingSwipl(t *testing.T, path, count, versionLine string) {
	t.Helper()
	script := "#!/bin/sh\necho run >> " + count + "\necho '" + versionLine + "'\n"
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const goodVersionLine = "SWI-Prolog version 9.0.4 for x86_64-linux"

// TestVersionCache: a warm start takes the version from the cache without
// running swipl; any change to the binary, and any entry that is not a
// private regular file naming the pinned version, runs it again.
func TestVersionCache(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// between runs after a first, cached check; returns the
		// version line the binary prints from then on.
		between  func(t *testing.T, c *stateCache, swipl, count string) string
		pinned   string
		wantRuns int // runs of swipl over both checks
		wantErr  string
	}{
		{"unchanged binary: cached", func(*testing.T, *stateCache, string, string) string { return goodVersionLine }, "9.0.4", 1, ""},
		{"binary replaced: asked again", func(t *testing.T, _ *stateCache, swipl, count string) string {
			writeCountingSwipl(t, swipl, count, "SWI-Prolog version 9.0.5 for x86_64-linux")
			return ""
		}, "9.0.4", 2, "swipl_version: " + "%SWIPL% is SWI-Prolog 9.0.5, pinned 9.0.4"},
		{"binary touched: asked again", func(t *testing.T, _ *stateCache, swipl, _ string) string {
			future := time.Now().Add(time.Hour)
			if err := os.Chtimes(swipl, future, future); err != nil {
				t.Fatal(err)
			}
			return goodVersionLine
		}, "9.0.4", 2, ""},
		{"pin changed: asked again, and fails", func(*testing.T, *stateCache, string, string) string { return goodVersionLine }, "9.0.3", 2, "swipl_version: %SWIPL% is SWI-Prolog 9.0.4, pinned 9.0.3"},
		{"entry names another version: asked again", func(t *testing.T, c *stateCache, swipl, _ string) string {
			writeEntry(t, c, swipl, "SWI-Prolog version 9.0.3 for x86_64-linux", 0o600)
			return goodVersionLine
		}, "9.0.4", 2, ""},
		{"entry garbage: asked again", func(t *testing.T, c *stateCache, swipl, _ string) string {
			writeEntry(t, c, swipl, "9.0.4", 0o600)
			return goodVersionLine
		}, "9.0.4", 2, ""},
		{"entry writable by others: asked again", func(t *testing.T, c *stateCache, swipl, _ string) string {
			writeEntry(t, c, swipl, goodVersionLine, 0o666)
			return goodVersionLine
		}, "9.0.4", 2, ""},
		{"entry at the size limit: used", func(t *testing.T, c *stateCache, swipl, _ string) string {
			writeEntry(t, c, swipl, goodVersionLine+strings.Repeat(" ", maxToolOutput-len(goodVersionLine)), 0o600)
			return goodVersionLine
		}, "9.0.4", 1, ""},
		{"entry past the size limit: asked again", func(t *testing.T, c *stateCache, swipl, _ string) string {
			writeEntry(t, c, swipl, goodVersionLine+strings.Repeat(" ", maxToolOutput-len(goodVersionLine)+1), 0o600)
			return goodVersionLine
		}, "9.0.4", 2, ""},
		{"entry a symlink: not followed, asked again", func(t *testing.T, c *stateCache, swipl, _ string) string {
			id, err := binaryID(swipl)
			if err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(t.TempDir(), "planted")
			if err := os.WriteFile(target, []byte(goodVersionLine), 0o600); err != nil {
				t.Fatal(err)
			}
			entry := filepath.Join(c.dir, versionFilePrefix+id)
			if err := os.Remove(entry); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, entry); err != nil {
				t.Fatal(err)
			}
			return goodVersionLine
		}, "9.0.4", 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			swipl, runs := countingSwipl(t, dir, goodVersionLine)
			c := &stateCache{dir: t.TempDir(), max: maxStateBytes, logger: hclog.NewNullLogger()}
			env := workerEnv(dir)
			if v, line, err := cachedVersion(context.Background(), c, swipl, "9.0.4", env); err != nil || v != "9.0.4" || line != goodVersionLine {
				t.Fatalf("first check: %q, %q, %v", v, line, err)
			}
			want := tc.between(t, c, swipl, filepath.Join(dir, "runs"))
			v, line, err := cachedVersion(context.Background(), c, swipl, tc.pinned, env)
			if got := runs(); got != tc.wantRuns {
				t.Errorf("swipl ran %d times, want %d", got, tc.wantRuns)
			}
			if tc.wantErr != "" {
				wantErr := strings.ReplaceAll(tc.wantErr, "%SWIPL%", swipl)
				if err == nil || !strings.HasPrefix(err.Error(), wantErr) {
					t.Fatalf("second check: %q, %q, %v; want error %q", v, line, err, wantErr)
				}
				return
			}
			if err != nil || v != "9.0.4" || line != want {
				t.Fatalf("second check: %q, %q, %v", v, line, err)
			}
			// Whatever was asked is what the cache holds now.
			if again, _, err := cachedVersion(context.Background(), c, swipl, "9.0.4", env); err != nil || again != "9.0.4" || runs() != tc.wantRuns {
				t.Fatalf("third check: %q, %v after %d runs", again, err, runs())
			}
		})
	}
}

// writeEntry overwrites the version cache entry of the binary at swipl.
func writeEntry(t *testing.T, c *stateCache, swipl, content string, mode os.FileMode) {
	t.Helper()
	id, err := binaryID(swipl)
	if err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(c.dir, versionFilePrefix+id)
	if err := os.WriteFile(entry, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(entry, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestVersionCacheFailureNotCached: a binary that fails the check leaves
// no entry, and one entry is kept per binary identity.
func TestVersionCacheFailureNotCached(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	swipl, runs := countingSwipl(t, dir, "I am not Prolog")
	c := &stateCache{dir: t.TempDir(), max: maxStateBytes, logger: hclog.NewNullLogger()}
	for i := range 2 {
		if _, _, err := cachedVersion(context.Background(), c, swipl, "9.0.4", workerEnv(dir)); err == nil || !strings.Contains(err.Error(), "unexpected output") {
			t.Fatalf("check %d: %v", i, err)
		}
	}
	if runs() != 2 {
		t.Fatalf("swipl ran %d times, want 2: a failed check must not be cached", runs())
	}
	writeCountingSwipl(t, swipl, filepath.Join(dir, "runs"), goodVersionLine)
	for range 2 {
		if _, _, err := cachedVersion(context.Background(), c, swipl, "9.0.4", workerEnv(dir)); err != nil {
			t.Fatal(err)
		}
	}
	writeCountingSwipl(t, swipl, filepath.Join(dir, "runs"), goodVersionLine)
	if _, _, err := cachedVersion(context.Background(), c, swipl, "9.0.4", workerEnv(dir)); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), versionFilePrefix) {
		t.Fatalf("cache dir holds %v, want the one entry of the current binary", ents)
	}
	if runs() != 4 {
		t.Fatalf("swipl ran %d times, want 4", runs())
	}
}

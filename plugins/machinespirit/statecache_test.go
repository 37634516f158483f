package machinespirit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// cacheEntries lists the saved-state entries and temp files in dir.
func cacheEntries(t *testing.T, dir string) (entries, temps []string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		switch {
		case strings.HasPrefix(de.Name(), stateFilePrefix):
			entries = append(entries, de.Name())
		case strings.HasPrefix(de.Name(), stateTempPrefix):
			temps = append(temps, de.Name())
		}
	}
	return entries, temps
}

// onlyKey returns the key of the one entry in dir and checks the cache
// holds nothing else: no second entry, no temp file, mode 0600.
func onlyKey(t *testing.T, dir string) string {
	t.Helper()
	entries, temps := cacheEntries(t, dir)
	if len(entries) != 1 || len(temps) != 0 {
		t.Fatalf("cache dir holds entries %v and temp files %v, want one entry", entries, temps)
	}
	fi, err := os.Lstat(filepath.Join(dir, entries[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache entry %s has mode %v, want a regular file 0600", entries[0], fi.Mode())
	}
	return strings.TrimPrefix(entries[0], stateFilePrefix)
}

func savedStateOf(t *testing.T, e *Executor) string {
	t.Helper()
	return e.Describe().Runtime["saved_state"]
}

// TestStateCacheSecondStartUsesIt: the first start builds the saved state
// and caches it; the second loads it from the cache (Describe says so)
// and its worker says hello, so the cached state is a working one.
func TestStateCacheSecondStartUsesIt(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	dir := t.TempDir()
	cfg := Config{SwiplPath: testSwipl, SwiplVersion: testVersion, StateCacheDir: dir}
	first := newExecutor(t, cfg)
	if got := savedStateOf(t, first); got != stateBuilt {
		t.Fatalf("first start: saved_state %q, want %q", got, stateBuilt)
	}
	key := onlyKey(t, dir)
	second := newExecutor(t, cfg)
	if got := savedStateOf(t, second); got != stateCached {
		t.Fatalf("second start: saved_state %q, want %q", got, stateCached)
	}
	if got := onlyKey(t, dir); got != key {
		t.Fatalf("the second start replaced entry %s by %s", key, got)
	}
	// Without a cache dir nothing is cached and the state is built.
	none := newExecutor(t, Config{SwiplPath: testSwipl, SwiplVersion: testVersion})
	if got := savedStateOf(t, none); got != stateBuilt {
		t.Fatalf("no cache dir: saved_state %q, want %q", got, stateBuilt)
	}
}

// TestStateCacheKey: a state is reused only for the same sources, swipl
// path and `swipl --version` line; any change builds (and replaces the
// entry, so the cache holds one state).
func TestStateCacheKey(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{SwiplPath: testSwipl, SwiplVersion: testVersion}.withDefaults()
	plain, err := embeddedSources(nil)
	if err != nil {
		t.Fatal(err)
	}
	extended, err := embeddedSources(testSources(t))
	if err != nil {
		t.Fatal(err)
	}
	const line = "SWI-Prolog version 9.0.4 for x86_64-linux"
	prepare := func(src sourceSet, path, versionLine string) string {
		t.Helper()
		run := t.TempDir()
		env := &runtimeEnv{dir: run, path: testSwipl, env: workerEnv(run),
			cache:    &stateCache{dir: dir, max: maxStateBytes, logger: hclog.NewNullLogger()},
			stateKey: stateKey(src.digest(), path, versionLine)}
		if err := prepareRuntime(ctx, cfg, src, env); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(env.state); err != nil || fi.Size() == 0 {
			t.Fatalf("no saved state in the runtime dir: %v", err)
		}
		return env.stateFrom
	}
	if got := prepare(plain, testSwipl, line); got != stateBuilt {
		t.Fatalf("empty cache: %q, want %q", got, stateBuilt)
	}
	tests := []struct {
		name        string
		src         sourceSet
		path, line  string
		want        string
		wantEntryOf sourceSet
	}{
		{"same sources, path and version", plain, testSwipl, line, stateCached, plain},
		{"sources changed", extended, testSwipl, line, stateBuilt, extended},
		{"same again after the change", extended, testSwipl, line, stateCached, extended},
		{"swipl version line changed", extended, testSwipl, "SWI-Prolog version 9.0.4 for aarch64-linux", stateBuilt, nil},
		{"swipl path changed", extended, "/opt/swipl/bin/swipl", "SWI-Prolog version 9.0.4 for aarch64-linux", stateBuilt, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := prepare(tc.src, tc.path, tc.line); got != tc.want {
				t.Fatalf("saved state %q, want %q", got, tc.want)
			}
			if got, want := onlyKey(t, dir), stateKey(tc.src.digest(), tc.path, tc.line); got != want {
				t.Fatalf("cache holds key %s, want %s", got, want)
			}
		})
	}
}

// TestStateCacheRejectsBadEntries: a cache entry that is corrupt, cut
// short, another key's, not a cache file, a symlink or writable by others
// is not used: the start rebuilds (Describe says "rebuilt"), the worker
// starts, and the entry is replaced by a good one.
func TestStateCacheRejectsBadEntries(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	seed := t.TempDir()
	cfg := Config{SwiplPath: testSwipl, SwiplVersion: testVersion, StateCacheDir: seed}
	newExecutor(t, cfg)
	key := onlyKey(t, seed)
	good, err := os.ReadFile(filepath.Join(seed, stateFilePrefix+key))
	if err != nil {
		t.Fatal(err)
	}
	otherKey := strings.Repeat("0", 64)
	mutate := func(f func(b []byte) []byte) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, f(bytes.Clone(good)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"a flipped bit in the payload", mutate(func(b []byte) []byte { b[len(b)-100] ^= 1; return b })},
		{"cut short", mutate(func(b []byte) []byte { return b[:len(b)/2] })},
		{"cut inside the header", mutate(func(b []byte) []byte { return b[:len(stateMagic)+10] })},
		{"empty", mutate(func([]byte) []byte { return nil })},
		{"another key's entry", mutate(func(b []byte) []byte { return bytes.Replace(b, []byte(key), []byte(otherKey), 1) })},
		{"not a cache file", mutate(func(b []byte) []byte { return b[len(stateMagic)+2*65:] })},
		{"a digest that matches garbage (does not load)", mutate(func([]byte) []byte {
			payload := []byte("not a saved state")
			sum := sha256.Sum256(payload)
			return append([]byte(stateMagic+key+"\n"+hex.EncodeToString(sum[:])+"\n"), payload...)
		})},
		{"a symlink to a good entry", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.WriteFile(target, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"writable by others", func(t *testing.T, path string) {
			if err := os.WriteFile(path, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o666); err != nil {
				t.Fatal(err)
			}
		}},
		{"a directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, stateFilePrefix+key)
			tc.plant(t, path)
			cfg.StateCacheDir = dir
			e := newExecutor(t, cfg)
			if got := savedStateOf(t, e); got != stateRebuilt {
				t.Fatalf("saved_state %q, want %q", got, stateRebuilt)
			}
			if tc.name == "a directory" {
				return // not replaceable by a rename; the next start rebuilds again
			}
			if got := onlyKey(t, dir); got != key {
				t.Fatalf("cache holds key %s, want %s", got, key)
			}
			c := &stateCache{dir: dir, max: maxStateBytes, logger: hclog.NewNullLogger()}
			if _, err := c.load(key); err != nil {
				t.Fatalf("the replaced entry does not verify: %v", err)
			}
		})
	}
}

// TestStateCacheBound: a state of exactly the bound is stored and loaded;
// one byte more is neither stored nor loaded.
func TestStateCacheBound(t *testing.T) {
	t.Parallel()
	const limit = 1000
	dir := t.TempDir()
	c := &stateCache{dir: dir, max: limit, logger: hclog.NewNullLogger()}
	at := bytes.Repeat([]byte{'x'}, limit)
	if err := c.store("k", at); err != nil {
		t.Fatalf("store at the bound: %v", err)
	}
	if got, err := c.load("k"); err != nil || !bytes.Equal(got, at) {
		t.Fatalf("load at the bound: %d bytes, %v", len(got), err)
	}
	if err := c.store("k", append(at, 'x')); err == nil || !strings.Contains(err.Error(), "exceeds the cache's bound of 1000") {
		t.Fatalf("store past the bound: %v", err)
	}
	// An entry past the bound written by someone else is refused.
	big := &stateCache{dir: dir, max: limit + 1, logger: hclog.NewNullLogger()}
	if err := big.store("k", append(at, 'x')); err != nil {
		t.Fatal(err)
	}
	var re *cacheRejectError
	if _, err := c.load("k"); !errors.As(err, &re) || !strings.Contains(err.Error(), "at most 1000") {
		t.Fatalf("load past the bound: %v", err)
	}
}

// TestStateCacheConcurrentFirstStarts: two plugins starting at once on an
// empty cache both build and both work; the cache ends with one entry that
// verifies, no temp file, and a third start uses it.
func TestStateCacheConcurrentFirstStarts(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	dir := t.TempDir()
	cfg := Config{SwiplPath: testSwipl, SwiplVersion: testVersion, StateCacheDir: dir}
	var wg sync.WaitGroup
	got := make([]string, 2)
	for i := range got {
		wg.Go(func() {
			e := New(context.Background(), cfg)
			defer e.Close()
			if p := e.Describe().Runtime["preflight"]; p != "ok" {
				got[i] = "preflight " + p
				return
			}
			got[i] = savedStateOf(t, e)
		})
	}
	wg.Wait()
	for i, g := range got {
		if g != stateBuilt && g != stateCached {
			t.Errorf("start %d: saved_state %q", i, g)
		}
	}
	key := onlyKey(t, dir)
	c := &stateCache{dir: dir, max: maxStateBytes, logger: hclog.NewNullLogger()}
	if _, err := c.load(key); err != nil {
		t.Fatalf("entry after concurrent writes: %v", err)
	}
	if g := savedStateOf(t, newExecutor(t, cfg)); g != stateCached {
		t.Fatalf("third start: saved_state %q, want %q", g, stateCached)
	}
}

// TestStateCacheDirFlag: a relative cache dir fails the preflight naming
// the flag; a missing one only costs the cache.
func TestStateCacheDirFlag(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	e := New(context.Background(), Config{SwiplPath: testSwipl, SwiplVersion: testVersion, StateCacheDir: "cache"})
	defer e.Close()
	if p := e.Describe().Runtime["preflight"]; !strings.HasPrefix(p, `failed: state_cache_dir: "cache" is not an absolute path`) {
		t.Fatalf("relative dir: preflight %q", p)
	}
	missing := newExecutor(t, Config{SwiplPath: testSwipl, SwiplVersion: testVersion, StateCacheDir: filepath.Join(t.TempDir(), "absent")})
	if g := savedStateOf(t, missing); g != stateBuilt {
		t.Fatalf("missing dir: saved_state %q, want %q", g, stateBuilt)
	}
}

package machinespirit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The saved-state cache keeps the worker's compiled saved state across
// plugin starts, in a directory the host gives the plugin
// (--state-cache-dir; the host's is <data dir>/cache/machinespirit).
// Building the state costs swipl a full compile of the sources (~0.4 s and
// more on a loaded machine); loading a cached one costs reading and
// hashing ~300 KiB.
//
// A cache entry is one file, state-<key>, where key is the SHA-256 of what
// the state was built from: the sources' digest, the `swipl --version`
// line, the swipl path and this format's version. Its content is a header
// — a magic line, the key, the SHA-256 of the payload — and the payload,
// the saved state itself. An entry is used only when it is a regular
// file (no symlink is followed) of this process's uid, writable by nobody
// else, within maxStateBytes, whose header names this key and whose
// payload hashes to the header's digest; anything else — truncated,
// flipped bits, another key's file copied over, a planted symlink — is
// rejected, logged, and replaced by a fresh build. The verified bytes are
// copied into the plugin's private runtime dir and the worker loads that
// copy, so nothing changed in the cache after the check reaches a worker.
//
// Writes are a temp file in the cache dir (0600) renamed over the entry:
// two plugins building the same key at once each rename a whole file, and
// whichever lands last wins. No fsync: a file cut short by a power loss
// fails its digest and is rebuilt.
//
// A state that passes these checks but that the worker cannot load (a
// swipl upgraded in place under the same version line, whose ABI no
// longer matches) fails the worker's hello; the preflight then drops the
// entry and builds once more (Executor.preflight).

const (
	stateMagic = "taskhost machinespirit saved state 1\n"
	// maxStateBytes bounds a saved state, read or written. The shipped
	// sources build ~270 KiB.
	maxStateBytes = 64 << 20
	// staleTempAge is how old a leftover temp file of a killed writer must
	// be before a later start removes it (a younger one may be another
	// plugin's write in progress).
	staleTempAge    = 10 * time.Minute
	stateFilePrefix = "state-"
	stateTempPrefix = ".tmp-state-"
)

// How a worker's saved state was obtained; Describe reports it as
// Runtime["saved_state"].
const (
	stateBuilt   = "built"   // compiled at this start; no cache configured, or none yet for this key
	stateCached  = "cached"  // loaded from the cache
	stateRebuilt = "rebuilt" // the cached entry was rejected and replaced
)

// stateCache is one cache directory.
type stateCache struct {
	dir    string
	max    int64 // maxStateBytes; tests lower it
	logger hclog.Logger
}

// stateKey names the cache entry of a state built from sources with
// digest sourcesDigest by the swipl at path that printed versionLine.
func stateKey(sourcesDigest, path, versionLine string) string {
	h := sha256.New()
	for _, part := range []string{stateMagic, sourcesDigest, path, versionLine} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c *stateCache) path(key string) string { return filepath.Join(c.dir, stateFilePrefix+key) }

// cacheRejectError says why a cache entry was not used.
type cacheRejectError struct{ why string }

func (e *cacheRejectError) Error() string { return "cache entry rejected: " + e.why }

func rejectf(format string, args ...any) error {
	return &cacheRejectError{why: fmt.Sprintf(format, args...)}
}

// load returns the verified payload of key's entry. A missing entry is
// fs.ErrNotExist; an entry that fails a check is a *cacheRejectError.
func (c *stateCache) load(key string) ([]byte, error) {
	f, err := os.OpenFile(c.path(key), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, rejectf("it is a symlink")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, rejectf("it is not a regular file (%s)", fi.Mode().Type())
	case st == nil || int(st.Uid) != os.Geteuid():
		return nil, rejectf("it is not owned by uid %d", os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return nil, rejectf("it has mode %04o: writable by group or others", fi.Mode().Perm())
	}
	header := int64(len(stateMagic) + 2*(64+1))
	if fi.Size() > header+c.max {
		return nil, rejectf("it is %d bytes: a saved state is at most %d", fi.Size()-header, c.max)
	}
	b, err := io.ReadAll(io.LimitReader(f, header+c.max+1))
	if err != nil {
		return nil, err
	}
	rest, ok := bytes.CutPrefix(b, []byte(stateMagic))
	if !ok {
		return nil, rejectf("no header: not a saved-state cache file")
	}
	gotKey, rest, ok1 := bytes.Cut(rest, []byte{'\n'})
	sum, payload, ok2 := bytes.Cut(rest, []byte{'\n'})
	switch {
	case !ok1 || !ok2:
		return nil, rejectf("truncated header")
	case string(gotKey) != key:
		return nil, rejectf("it holds the state of key %s", truncate(string(gotKey), 64))
	case int64(len(payload)) > c.max:
		return nil, rejectf("it is %d bytes: a saved state is at most %d", len(payload), c.max)
	}
	if got := sha256.Sum256(payload); hex.EncodeToString(got[:]) != string(sum) {
		return nil, rejectf("its payload does not hash to its header's SHA-256 (corrupt or cut short)")
	}
	return payload, nil
}

// store writes payload as key's entry: a temp file renamed into place.
func (c *stateCache) store(key string, payload []byte) error {
	if int64(len(payload)) > c.max {
		return fmt.Errorf("saved state of %d bytes exceeds the cache's bound of %d", len(payload), c.max)
	}
	sum := sha256.Sum256(payload)
	f, err := os.CreateTemp(c.dir, stateTempPrefix+"*") // 0600
	if err != nil {
		return fmt.Errorf("saved-state cache: %w", err)
	}
	_, err = f.WriteString(stateMagic + key + "\n" + hex.EncodeToString(sum[:]) + "\n")
	if err == nil {
		_, err = f.Write(payload)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(key))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("saved-state cache: %w", err)
	}
	return nil
}

// drop removes key's entry (a state the worker could not load).
func (c *stateCache) drop(key string) {
	if err := os.Remove(c.path(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.logger.Warn("removing a saved-state cache entry", "error", err)
	}
}

// prune removes the entries of other keys (sources or runtimes no longer
// in use: the cache holds one state per plugin build and swipl) and temp
// files that a killed writer left long ago.
func (c *stateCache) prune(keep string) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, ent := range entries {
		name := ent.Name()
		switch {
		case strings.HasPrefix(name, stateFilePrefix) && name != stateFilePrefix+keep:
		case strings.HasPrefix(name, stateTempPrefix):
			if fi, err := ent.Info(); err != nil || time.Since(fi.ModTime()) < staleTempAge {
				continue
			}
		default:
			continue
		}
		if err := os.Remove(filepath.Join(c.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.logger.Warn("pruning the saved-state cache", "file", name, "error", err)
		}
	}
}

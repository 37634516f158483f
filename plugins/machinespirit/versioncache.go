package machinespirit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The version cache lets a warm start skip `swipl --version` (~10 ms,
// several times that on a loaded machine). It keeps, in the saved-state
// cache dir, the line the binary printed, in a file named after the
// binary's identity: the path given and, of the file it resolves to, the
// device, inode, size, mtime and ctime. Replacing, rewriting, re-linking
// or chmod-ing the binary changes one of them, so the entry is then
// missed and the binary asked again; a package upgrade unpacks new files
// (new inodes).
//
// What the entry could get wrong is caught downstream: the line must
// still name the pinned version (else the binary is asked and fails the
// check with its own words), and every worker's hello reports the version
// the runtime really runs, which must be the pinned one (checkHello). A
// library swapped under an unchanged binary therefore fails the preflight
// closed instead of running the wrong runtime.
//
// An entry is read under the saved state's rules: a regular file (no
// symlink followed) of this uid, writable by nobody else, within
// maxToolOutput bytes; anything else is ignored and rewritten.

const versionFilePrefix = "version-"

// binaryID is the identity of the file at path, as the version cache keys
// it.
func binaryID(path string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", err
	}
	h := sha256.New()
	for _, part := range []string{stateMagic, "swipl --version", path,
		strconv.FormatUint(st.Dev, 10), strconv.FormatUint(st.Ino, 10), strconv.FormatInt(st.Size, 10),
		strconv.FormatInt(st.Mtim.Nano(), 10), strconv.FormatInt(st.Ctim.Nano(), 10)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// loadVersion returns the cached version line of the binary with identity
// id; ok is false when there is none to trust.
func (c *stateCache) loadVersion(id string) (line string, ok bool) {
	f, err := os.OpenFile(filepath.Join(c.dir, versionFilePrefix+id), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.logger.Warn("swipl version cache entry not used", "error", err)
		}
		return "", false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", false
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || st == nil || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 || fi.Size() > maxToolOutput {
		c.logger.Warn("swipl version cache entry not used: not a private regular file within bounds", "mode", fi.Mode().String(), "size", fi.Size())
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxToolOutput+1))
	if err != nil || len(b) > maxToolOutput {
		return "", false
	}
	return strings.TrimSpace(string(b)), true // as checkVersion trims what swipl prints
}

// storeVersion records line as the version of the binary with identity
// id, replacing the entries of other identities. A failure costs only
// the next start's check, so it is logged.
func (c *stateCache) storeVersion(id, line string) {
	f, err := os.CreateTemp(c.dir, stateTempPrefix+"*") // 0600
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), filepath.Join(c.dir, versionFilePrefix+id))
		}
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}
	if err != nil {
		c.logger.Warn("swipl version not cached", "error", err)
		return
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, ent := range entries {
		if name := ent.Name(); strings.HasPrefix(name, versionFilePrefix) && name != versionFilePrefix+id {
			_ = os.Remove(filepath.Join(c.dir, name))
		}
	}
}

// cachedVersion is checkVersion through the version cache (nil: none):
// a cached line that still names the pinned version is taken as what
// the binary would print; otherwise the binary is asked, and a line
// that passes is cached.
func cachedVersion(ctx context.Context, c *stateCache, path, pinned string, env []string) (version, line string, err error) {
	if c == nil {
		return checkVersion(ctx, path, pinned, env)
	}
	id, err := binaryID(path)
	if err != nil {
		return "", "", failCheck("swipl_path", "%w", err)
	}
	if line, ok := c.loadVersion(id); ok {
		if m := versionLineRE.FindStringSubmatch(line); m != nil && m[1] == pinned {
			return m[1], line, nil
		}
	}
	if version, line, err = checkVersion(ctx, path, pinned, env); err != nil {
		return version, line, err
	}
	// Identity taken before the run: a binary replaced meanwhile is
	// cached under its predecessor's identity, which no later stat
	// yields.
	c.storeVersion(id, line)
	return version, line, nil
}

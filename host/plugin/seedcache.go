package plugin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A plugin under a uid of the pool cannot share a cache the daemon keeps
// (machinespirit's compiled saved state): a cache its uid could write would
// let one task's process plant what a later task's process loads. So the
// daemon keeps the cache (Confinement.SeedCache) where only it reaches, and
// each launch gets a copy of its files in a dir of the plugin's own uid,
// named to the plugin by Confinement.SeedCacheFlag. Only what a probe — a
// launch that serves no task, whose process no task's data has reached —
// left in its copy is taken back into the cache. The plugin still checks
// what it loads (machinespirit: header, key and digest of every entry).

// Bounds on a seed cache: the files copied in and taken back.
const (
	maxSeedFiles = 16
	maxSeedBytes = 64 << 20
)

// seedCache is one launch's copy of a kind's cache.
type seedCache struct {
	cache string // the daemon's
	copy  string // the plugin's
}

// newSeedCache copies cache's regular files into dir (created 0700, owned
// by uid and gid, as is every copy).
func newSeedCache(cache, dir string, uid, gid int) (*seedCache, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("seed cache: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("seed cache: %w", err)
	}
	names, err := seedFiles(cache)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if err := copySeedFile(filepath.Join(cache, name), filepath.Join(dir, name), uid, gid); err != nil {
			return nil, err
		}
	}
	return &seedCache{cache: cache, copy: dir}, nil
}

// keep takes into the daemon's cache every file of the copy the cache does
// not hold yet. Call it only for a launch that served no task, before the
// plugin's dirs are removed.
func (s *seedCache) keep() error {
	have, err := seedFiles(s.cache)
	if err != nil {
		return err
	}
	names, err := seedFiles(s.copy)
	if err != nil {
		return err
	}
	for _, name := range names {
		if len(have) >= maxSeedFiles {
			return nil
		}
		if _, err := os.Lstat(filepath.Join(s.cache, name)); err == nil {
			continue
		}
		tmp := filepath.Join(s.cache, ".tmp-"+name)
		if err := copySeedFile(filepath.Join(s.copy, name), tmp, os.Geteuid(), os.Getegid()); err != nil {
			os.Remove(tmp)
			return err
		}
		if err := os.Rename(tmp, filepath.Join(s.cache, name)); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("seed cache: %w", err)
		}
		have = append(have, name)
	}
	return nil
}

// seedFiles lists dir's regular files, at most maxSeedFiles of them; names
// starting with a dot (temp files) are left out.
func seedFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("seed cache: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if names = append(names, e.Name()); len(names) == maxSeedFiles {
			break
		}
	}
	return names, nil
}

// copySeedFile copies one regular file of at most maxSeedBytes, following
// no symlink, into a new 0600 file owned by uid and gid.
func copySeedFile(from, to string, uid, gid int) error {
	in, err := os.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("seed cache: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return fmt.Errorf("seed cache: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxSeedBytes {
		return fmt.Errorf("seed cache: %s is not a regular file of at most %d bytes", from, maxSeedBytes)
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("seed cache: %w", err)
	}
	_, err = io.Copy(out, io.LimitReader(in, maxSeedBytes))
	if err == nil {
		err = out.Chown(uid, gid)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(to)
		return fmt.Errorf("seed cache: %w", err)
	}
	return nil
}

package datadir

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// loadOrCreateKey returns the data dir's host key, creating it (0600) on
// first use. Anyone who can read or replace the key can forge checkpoints,
// so the file is opened without following a symlink and checked on the open
// descriptor (no window between check and read): a regular file of the
// daemon's uid, mode 0600 or stricter, 32 bytes.
func loadOrCreateKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return createKey(path)
	}
	if errors.Is(err, syscall.ELOOP) {
		target, _ := os.Readlink(path)
		return nil, &UntrustedPathError{Path: path, Found: "is a symlink to " + target,
			Fix: "remove the link and put the key file itself there"}
	}
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	if err := checkEntry(path, fi, kindSecret, os.Geteuid()); err != nil {
		return nil, err
	}
	key, err := io.ReadAll(io.LimitReader(f, 33))
	if err != nil {
		return nil, fmt.Errorf("host key: read %s: %w", path, err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("host key %s is %d bytes, want 32: the file is damaged; restore it from backup (checkpoints sealed with it cannot be opened without it)", path, fi.Size())
	}
	return key, nil
}

// createKey writes a new random key to path, which must not exist (O_EXCL
// also refuses a dangling symlink).
func createKey(path string) ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host key: create %s: %w", path, err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("host key: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("host key: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("host key: close %s: %w", path, err)
	}
	return key, syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// HostIDFromKey derives a host id from a data dir's host key and, when the
// key is shared by a fleet, what else tells the hosts apart (the machine's
// name, the data dir's path): stable across restarts; with the key alone,
// carried by a backup, so a restored data dir recovers its own runs. 64
// bits of an HMAC: the key stays secret.
func HostIDFromKey(key []byte, distinct ...string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("taskhost host id"))
	for _, d := range distinct {
		m.Write([]byte{0})
		m.Write([]byte(d))
	}
	return "h-" + hex.EncodeToString(m.Sum(nil)[:8])
}

package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// keysXattr is the extended attribute in which a workspace file remembers
// the idempotency keys of its last keyed writes: one line per write, the
// key's digest and the write's digest. It is set on the new content before
// the rename that publishes it, so the content and its keys change in one
// step: a crash leaves either both or neither. Digests keep the value
// bounded whatever the keys are, and tell a repeated write from another
// write under a reused key.
const keysXattr = "user.taskhost.idempotency"

// maxKeysXattr bounds the attribute: keysKept lines of two 32-character
// digests.
const maxKeysXattr = keysKept * (32 + 1 + 32 + 1)

func digest32(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// fileKeys reads the keys a file remembers (none when it has no
// attribute). An error means they cannot be known.
func fileKeys(f *os.File) ([]string, error) {
	buf := make([]byte, maxKeysXattr)
	n, err := unix.Fgetxattr(int(f.Fd()), keysXattr, buf)
	switch {
	case errors.Is(err, unix.ENODATA):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	return strings.Split(string(buf[:n]), "\n"), nil
}

// setFileKeys writes keys onto f, the last keysKept of them.
func setFileKeys(f *os.File, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	keys = keys[max(0, len(keys)-keysKept):]
	return unix.Fsetxattr(int(f.Fd()), keysXattr, []byte(strings.Join(keys, "\n")), 0)
}

// keyedWrite is the idempotency of one write: the line it adds to the
// file's keys.
type keyedWrite struct {
	key, write string // digests
}

func newKeyedWrite(key, content string, appendMode bool) keyedWrite {
	mode := "replace"
	if appendMode {
		mode = "append"
	}
	return keyedWrite{key: digest32(key), write: digest32(mode, content)}
}

func (k keyedWrite) line() string { return k.key + "\t" + k.write }

// applied reports whether keys record this write; a key recorded with
// another write is an error: the caller reused a key.
func (k keyedWrite) applied(keys []string) (bool, error) {
	for _, l := range keys {
		key, write, _ := strings.Cut(l, "\t")
		if key != k.key {
			continue
		}
		if write != k.write {
			return false, errors.New("was already used for a different write to this file")
		}
		return true, nil
	}
	return false, nil
}

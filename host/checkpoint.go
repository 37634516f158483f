package host

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// envelopeMagic starts every sealed checkpoint so a foreign blob is refused
// before anything else is parsed.
const envelopeMagic = "THCP1\n"

// maxEnvelopeHeader bounds the header a decoder will read.
const maxEnvelopeHeader = 4096

// ErrCheckpointIncompatible is returned when a stored checkpoint does not
// belong to the task, principal or executor that loads it, or was altered.
var ErrCheckpointIncompatible = errors.New("checkpoint incompatible")

// envelopeHeader is the authenticated metadata of a sealed checkpoint.
type envelopeHeader struct {
	TaskID      string `json:"task_id"`
	PrincipalID string `json:"principal_id"`
	Executor    string `json:"executor"`
	Schema      string `json:"schema"`
	Attempt     int64  `json:"attempt"`
	Digest      string `json:"sha256"`
	MAC         string `json:"mac"`
}

// owner identifies whose checkpoint an envelope is.
type owner struct {
	TaskID, PrincipalID, Executor string
}

// sealer seals and opens checkpoint envelopes with the data dir's host key.
type sealer struct {
	key []byte
}

func (s sealer) mac(h envelopeHeader) string {
	m := hmac.New(sha256.New, s.key)
	// Length-prefixed fields: no two different headers encode alike.
	for _, f := range []string{h.TaskID, h.PrincipalID, h.Executor, h.Schema, fmt.Sprint(h.Attempt), h.Digest} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// seal wraps cp for o at attempt into a self-authenticating envelope.
func (s sealer) seal(o owner, attempt int64, cp plugin.Checkpoint) []byte {
	sum := sha256.Sum256(cp.Payload)
	h := envelopeHeader{
		TaskID: o.TaskID, PrincipalID: o.PrincipalID, Executor: o.Executor,
		Schema: cp.Schema, Attempt: attempt, Digest: hex.EncodeToString(sum[:]),
	}
	h.MAC = s.mac(h)
	hdr, _ := json.Marshal(h) // a struct of strings cannot fail to marshal
	var buf bytes.Buffer
	buf.Grow(len(envelopeMagic) + binary.MaxVarintLen64 + len(hdr) + len(cp.Payload))
	buf.WriteString(envelopeMagic)
	buf.Write(binary.AppendUvarint(nil, uint64(len(hdr))))
	buf.Write(hdr)
	buf.Write(cp.Payload)
	return buf.Bytes()
}

// open verifies env against o and returns the checkpoint and its attempt.
// Every failure wraps ErrCheckpointIncompatible and says which check failed.
func (s sealer) open(o owner, env []byte) (plugin.Checkpoint, int64, error) {
	fail := func(format string, args ...any) (plugin.Checkpoint, int64, error) {
		return plugin.Checkpoint{}, 0, fmt.Errorf("%w: %s", ErrCheckpointIncompatible, fmt.Sprintf(format, args...))
	}
	rest, ok := bytes.CutPrefix(env, []byte(envelopeMagic))
	if !ok {
		return fail("not a taskhost checkpoint envelope")
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > maxEnvelopeHeader || n > uint64(len(rest)-k) {
		return fail("envelope header length is invalid")
	}
	var h envelopeHeader
	dec := json.NewDecoder(bytes.NewReader(rest[k : k+int(n)]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return fail("envelope header: %v", err)
	}
	payload := rest[k+int(n):]
	if !hmac.Equal([]byte(h.MAC), []byte(s.mac(h))) {
		return fail("envelope MAC does not verify (altered, or sealed with another host key)")
	}
	switch {
	case h.TaskID != o.TaskID:
		return fail("envelope belongs to another task")
	case h.PrincipalID != o.PrincipalID:
		return fail("envelope belongs to another principal")
	case h.Executor != o.Executor:
		return fail("envelope was written by executor %q, task uses %q", h.Executor, o.Executor)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != h.Digest {
		return fail("payload digest does not match")
	}
	return plugin.Checkpoint{Schema: h.Schema, Payload: bytes.Clone(payload)}, h.Attempt, nil
}

// openStored opens t's stored checkpoint, nil when it has none. Besides the
// envelope's own checks, the envelope must be the task's latest checkpoint:
// the attempt it was sealed at must be the one the task row records, so an
// older envelope of the same task written back into the row (a rollback) is
// refused, as is a checkpoint removed from a task that had one.
func (s sealer) openStored(t store.Task) (*plugin.Checkpoint, error) {
	if t.Checkpoint == nil {
		if t.CheckpointAttempt != 0 {
			return nil, fmt.Errorf("%w: the task's checkpoint of attempt %d is missing from its row", ErrCheckpointIncompatible, t.CheckpointAttempt)
		}
		return nil, nil
	}
	cp, attempt, err := s.open(owner{TaskID: t.ID, PrincipalID: t.PrincipalID, Executor: t.Executor}, t.Checkpoint)
	if err != nil {
		return nil, err
	}
	if attempt != t.CheckpointAttempt {
		return nil, fmt.Errorf("%w: envelope was sealed at attempt %d, the task's latest checkpoint is from attempt %d (an older checkpoint written back?)",
			ErrCheckpointIncompatible, attempt, t.CheckpointAttempt)
	}
	return &cp, nil
}

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

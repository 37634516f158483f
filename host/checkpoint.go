package host

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/taskhost/taskhost/host/datadir"
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

// VerifyCheckpoint checks t's stored checkpoint against key as a resume
// would; a task without one verifies. A backup's verify uses it.
func VerifyCheckpoint(key []byte, t store.Task) error {
	_, err := sealer{key: key}.openStored(t)
	return err
}

// Restore makes dataDir a data dir holding the backup in src and checks
// every checkpoint in it against the restored key (datadir.Restore).
func Restore(ctx context.Context, src, dataDir string, opts datadir.RestoreOptions) (datadir.RestoreInfo, error) {
	return datadir.Restore(ctx, src, dataDir, VerifyCheckpoint, opts)
}

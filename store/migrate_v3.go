package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
)

// Layout of a sealed checkpoint's start, as host/checkpoint.go writes it:
// a magic line, a uvarint header length, then the JSON header. The store
// treats envelopes as opaque everywhere else; the v3 back-fill is the one
// place that reads a field of one, once, when the column is added.
const (
	envelopeMagic     = "THCP1\n"
	maxEnvelopeHeader = 4096
	// envelopePrefix is enough of an envelope to hold its whole header.
	envelopePrefix = len(envelopeMagic) + binary.MaxVarintLen64 + maxEnvelopeHeader
)

// fillCheckpointAttempts sets, for every task that has a checkpoint, the
// new checkpoint_attempt column to the attempt recorded in the envelope's
// header, so that tasks checkpointed before v3 still resume. The header's
// MAC is not verified here (the store has no key): the host still opens
// and verifies the envelope on every resume. A checkpoint whose header
// cannot be read keeps 0, which no sealed envelope matches, so the task
// fails closed with checkpoint_incompatible on resume, as it would have
// before.
func fillCheckpointAttempts(ctx context.Context, tx *sql.Tx) error {
	type fill struct {
		id      string
		attempt int64
	}
	// Only each envelope's prefix is read: checkpoints can be hundreds of
	// KiB each, headers are at most a few.
	rows, err := tx.QueryContext(ctx, `SELECT id, substr(checkpoint, 1, $1) FROM tasks WHERE checkpoint IS NOT NULL`, envelopePrefix)
	if err != nil {
		return err
	}
	var fills []fill
	for rows.Next() {
		var id string
		var prefix []byte
		if err := rows.Scan(&id, &prefix); err != nil {
			rows.Close()
			return err
		}
		if n, ok := envelopeAttempt(prefix); ok {
			fills = append(fills, fill{id, n})
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, f := range fills {
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET checkpoint_attempt = $1 WHERE id = $2`, f.attempt, f.id); err != nil {
			return err
		}
	}
	return nil
}

// envelopeAttempt reads the attempt from the header of a sealed checkpoint
// (or of its first envelopePrefix bytes).
func envelopeAttempt(env []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(env, []byte(envelopeMagic))
	if !ok {
		return 0, false
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > maxEnvelopeHeader || n > uint64(len(rest)-k) {
		return 0, false
	}
	var h struct {
		Attempt int64 `json:"attempt"`
	}
	if err := json.Unmarshal(rest[k:k+int(n)], &h); err != nil || h.Attempt < 1 {
		return 0, false
	}
	return h.Attempt, true
}

package api

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/taskhost/taskhost/store"
)

// pageCipher seals ListTasks cursors. A cursor is the store's global
// sequence number of the last task listed; in the clear it would tell a
// principal how many tasks everyone else created in between. Sealed with
// AES-GCM under a key drawn when the daemon starts, and bound to the
// principal as additional data, a token reveals nothing and is refused for
// any other principal, after any change, and after a daemon restart.
type pageCipher struct{ aead cipher.AEAD }

// pageTokenLen is the length of a token in base64url: nonce, cursor (seq
// and status), tag.
var pageTokenLen = base64.RawURLEncoding.EncodedLen(12 + cursorLen + 16)

// cursor is where a listing's next page starts: the last task listed.
type cursor struct {
	seq    int64
	status store.Status // for the status order; "" otherwise
}

const cursorLen = 8 + 1

// cursorStatuses numbers the statuses for a cursor's status byte.
var cursorStatuses = []store.Status{"", store.StatusPending, store.StatusRunning, store.StatusWaitingApproval,
	store.StatusCompleted, store.StatusFailed, store.StatusCancelled, store.StatusInterrupted}

func newPageCipher() (*pageCipher, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("api: page token key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("api: page token key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("api: page token key: %w", err)
	}
	return &pageCipher{aead: aead}, nil
}

// seal issues the token of cur. scope names the listing's order and
// filters: bound like the principal, a token opens only for the listing
// it came from, so a cursor of one order is never read in another.
func (c *pageCipher) seal(principal, scope string, cur cursor) string {
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+cursorLen+c.aead.Overhead())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails on Linux
	var plain [cursorLen]byte
	binary.BigEndian.PutUint64(plain[:8], uint64(cur.seq))
	plain[8] = byte(max(0, slices.Index(cursorStatuses, cur.status)))
	return base64.RawURLEncoding.EncodeToString(c.aead.Seal(nonce, nonce, plain[:], aad(principal, scope)))
}

func aad(principal, scope string) []byte { return []byte(principal + "\x00" + scope) }

// open returns the cursor of tok for principal and scope; "" is the first
// page (a zero cursor).
func (c *pageCipher) open(principal, scope, tok string) (cursor, error) {
	if tok == "" {
		return cursor{}, nil
	}
	refuse := func(why string) (cursor, error) {
		return cursor{}, invalid("page_token", why+": pass next_page_token of your previous page unchanged, with the same sort and filters, or \"\" to start over")
	}
	if len(tok) != pageTokenLen {
		return refuse(fmt.Sprintf("is %d characters, a token of this daemon has %d", len(tok), pageTokenLen))
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return refuse("is not a token of this daemon")
	}
	n := c.aead.NonceSize()
	plain, err := c.aead.Open(nil, raw[:n], raw[n:], aad(principal, scope))
	if err != nil {
		return refuse("is not a token this daemon issued to you for this listing (changed, another principal's or listing's, or from before a restart)")
	}
	seq := int64(binary.BigEndian.Uint64(plain[:8]))
	if seq <= 0 || int(plain[8]) >= len(cursorStatuses) {
		return refuse("is not a token of this daemon")
	}
	return cursor{seq: seq, status: cursorStatuses[plain[8]]}, nil
}

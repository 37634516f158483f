package api

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
)

// pageCipher seals ListTasks cursors. A cursor is the store's global
// sequence number of the last task listed; in the clear it would tell a
// principal how many tasks everyone else created in between. Sealed with
// AES-GCM under a key drawn when the daemon starts, and bound to the
// principal as additional data, a token reveals nothing and is refused for
// any other principal, after any change, and after a daemon restart.
type pageCipher struct{ aead cipher.AEAD }

// pageTokenLen is the length of a token in base64url: nonce, seq, tag.
var pageTokenLen = base64.RawURLEncoding.EncodedLen(12 + 8 + 16)

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

func (c *pageCipher) seal(principal string, seq int64) string {
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+8+c.aead.Overhead())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails on Linux
	var plain [8]byte
	binary.BigEndian.PutUint64(plain[:], uint64(seq))
	return base64.RawURLEncoding.EncodeToString(c.aead.Seal(nonce, nonce, plain[:], []byte(principal)))
}

// open returns the cursor of tok for principal; "" is the first page.
func (c *pageCipher) open(principal, tok string) (int64, error) {
	if tok == "" {
		return 0, nil
	}
	refuse := func(why string) (int64, error) {
		return 0, invalid("page_token", why+": pass next_page_token of your previous page unchanged, or \"\" to start over")
	}
	if len(tok) != pageTokenLen {
		return refuse(fmt.Sprintf("is %d characters, a token of this daemon has %d", len(tok), pageTokenLen))
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return refuse("is not a token of this daemon")
	}
	n := c.aead.NonceSize()
	plain, err := c.aead.Open(nil, raw[:n], raw[n:], []byte(principal))
	if err != nil {
		return refuse("is not a token this daemon issued to you (changed, another principal's, or from before a restart)")
	}
	seq := int64(binary.BigEndian.Uint64(plain))
	if seq <= 0 {
		return refuse("is not a token of this daemon")
	}
	return seq, nil
}

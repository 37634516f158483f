// Package text bounds strings: the one place the module cuts a string to a
// limit. Cuts never split a UTF-8 sequence, so a cut valid string stays
// valid; a limit below zero counts as zero.
package text

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Truncate returns s cut to at most n bytes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Clip is Truncate marked for a reader: a cut s ends in "..." after at
// most n bytes of it. It bounds untrusted input quoted in a message.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Truncate(s, n) + "..."
}

// TruncateRunes returns s cut to at most n characters (runes).
func TruncateRunes(s string, n int) string {
	i := 0
	for k := range s {
		if i >= n {
			return s[:k]
		}
		i++
	}
	return s
}

// PyStrip is Python's str.strip() without arguments: it removes, at both
// ends, the characters str.isspace accepts — unicode.IsSpace's and the
// ASCII information separators U+001C to U+001F — as Zara does to a goal.
func PyStrip(s string) string {
	return strings.TrimFunc(s, PyIsSpace)
}

// PyIsSpace is Python's str.isspace for one character.
func PyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

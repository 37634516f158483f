package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxDescribeBytes bounds the argument text Describe returns, before its
// truncation marker.
const MaxDescribeBytes = 512

// Describe returns what an approver is shown for a tool call: the call's
// arguments, bounded and escaped. Unlike [Summarize] it contains argument
// values, so it goes to the approval record of the task's owner only, never
// into events, the ledger or logs (DESIGN.md §6, §7).
//
// For shell.run it is the command itself; for the other built-in tools the
// canonical JSON of the arguments; for anything else, Summarize's text. At
// most MaxDescribeBytes of it are kept, and a cut is marked
// "…(+N bytes)", N counting the bytes of the command (or JSON) left out.
// The text is escaped with [Visible], so it holds no control character, no
// invalid UTF-8 and nothing a terminal could take for an escape sequence.
func Describe(name string, args json.RawMessage) string {
	switch {
	case name == ToolShellRun:
		var a struct {
			Command string `json:"command"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(args), &a); err == nil && a.Command != "" {
			return boundVisible(a.Command, true, MaxDescribeBytes)
		}
	case isBuiltin(name):
		if canon, err := canonicalJSON(args); err == nil {
			// JSON already escapes backslashes and control characters;
			// only what it leaves raw (non-printable runes) is escaped.
			return boundVisible(string(canon), false, MaxDescribeBytes)
		}
	}
	return Summarize(name, args)
}

// MaxApprovalCommandBytes bounds the visible form of a shell.run command an
// approval shows: it is shown whole, or the call is refused before it is
// admitted (DescribeForApproval). It leaves the approval record's other
// 464 bytes for the host's own notes.
const MaxApprovalCommandBytes = 1536

// DescribeForApproval is what an approver is shown of a call that needs an
// approval: Describe, except that a shell.run command is never cut — ok is
// false when its visible form is longer than MaxApprovalCommandBytes, and
// such a call must be refused: nobody can approve what they cannot see.
// visibleLen is that form's length.
func DescribeForApproval(name string, args json.RawMessage) (desc string, visibleLen int, ok bool) {
	if name != ToolShellRun {
		return Describe(name, args), 0, true
	}
	var a struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(args), &a); err != nil || a.Command == "" {
		return Describe(name, args), 0, true
	}
	v := Visible(a.Command)
	return v, len(v), len(v) <= MaxApprovalCommandBytes
}

func isBuiltin(name string) bool {
	for _, b := range builtins() {
		if b.spec.Name == name {
			return true
		}
	}
	return false
}

// Visible escapes s so that it shows as one line of plain text, in the
// manner of Go's %q without the quotes: printable runes are kept (quotes
// included), a backslash becomes \\, newline, tab and carriage return become
// \n, \t and \r, any other control or non-printable rune (ESC, the Unicode
// bidirectional overrides, ...) becomes \xNN, \uNNNN or \UNNNNNNNN, and a
// byte that is not UTF-8 becomes \xNN. Escaping the backslash keeps the
// result unambiguous: a command holding a real newline and one holding the
// two characters \ n read differently.
func Visible(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		piece, n := visibleRune(s, true)
		b.WriteString(piece)
		s = s[n:]
	}
	return b.String()
}

// Printable makes text that is already meant to be read (an executor's
// approval prompt) safe to show: as Visible, but a backslash is kept as it
// is, so text that went through Printable or Visible before comes out
// unchanged. At most limit bytes are kept before a "…(+N bytes)" marker.
func Printable(s string, limit int) string {
	return boundVisible(s, false, limit)
}

// boundVisible escapes s rune by rune (see Visible; the backslash only when
// escapeBackslash) until the next piece would pass limit bytes, and marks a
// cut with the number of bytes of s left out.
func boundVisible(s string, escapeBackslash bool, limit int) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		piece, n := visibleRune(s[i:], escapeBackslash)
		if b.Len()+len(piece) > limit {
			fmt.Fprintf(&b, "…(+%d bytes)", len(s)-i)
			break
		}
		b.WriteString(piece)
		i += n
	}
	return b.String()
}

// visibleRune returns the visible form of the first rune of s and the
// number of bytes of s it stands for.
func visibleRune(s string, escapeBackslash bool) (string, int) {
	r, n := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && n <= 1:
		return fmt.Sprintf(`\x%02x`, s[0]), 1
	case r == '\\':
		if escapeBackslash {
			return `\\`, n
		}
		return `\`, n
	case r == '\n':
		return `\n`, n
	case r == '\t':
		return `\t`, n
	case r == '\r':
		return `\r`, n
	case r < 0x80 && (r < 0x20 || r == 0x7f):
		return fmt.Sprintf(`\x%02x`, r), n
	case !unicode.IsPrint(r):
		if r > 0xffff {
			return fmt.Sprintf(`\U%08x`, r), n
		}
		return fmt.Sprintf(`\u%04x`, r), n
	}
	return s[:n], n
}

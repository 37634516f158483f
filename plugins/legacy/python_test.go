package legacy

import (
	"strings"
	"testing"
	"unicode"
)

// The facts below were read off Python 3 (str.isspace, str.upper) over
// every code point, once, while writing this; the tests hold the Go side
// to them without needing Python.

// pythonSpaces is every c with c.isspace().
const pythonSpaces = "\t\n\v\f\r\x1c\x1d\x1e\x1f \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"

func TestPyIsSpaceIsPythonsIsspace(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if got, want := pyIsSpace(r), strings.ContainsRune(pythonSpaces, r); got != want {
			t.Errorf("pyIsSpace(%U) = %v, Python says %v", r, got, want)
		}
	}
}

func TestPyStrip(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "",
		" \t\n x y \r\n":      "x y",
		"\x1c\x1dx\x1e\x1f":   "x",
		"\u3000\u00a0x\u2029": "x",
		"\u200bx\u200b":       "\u200bx\u200b", // zero-width space is no space to Python
		"\ufeffx":             "\ufeffx",
		"\u180ex":             "\u180ex",
		"\x00x\x00":           "\x00x\x00",
		"x\n\ny":              "x\n\ny",
	} {
		if got := pyStrip(in); got != want {
			t.Errorf("pyStrip(%q) = %q, want %q", in, got, want)
		}
	}
}

// pythonUpperToASCII maps each non-ASCII c whose c.upper() is one ASCII
// character to it. (Characters whose upper case is several, like 'ß' to
// "SS" or 'ﬅ' to "ST", can never spell TASK_COMPLETE at their place; none
// begins with its last letter E, so none completes it across the end.)
var pythonUpperToASCII = map[rune]rune{'\u0131': 'I', '\u017f': 'S'}

func TestSentinelPrefixIsPythonsUpperStartswith(t *testing.T) {
	// sentinelPrefix compares unicode.ToUpper of each character with the
	// sentinel's: that is Python's upper() wherever the result is ASCII.
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		u := unicode.ToUpper(r)
		if want, ok := pythonUpperToASCII[r]; (u < 0x80) != ok || (ok && u != want) {
			t.Errorf("unicode.ToUpper(%U) = %U; Python's upper case is ASCII: %v %q", r, u, ok, want)
		}
	}
	// And end to end, every code point in place of the S, the letter with
	// a non-ASCII lower case ('ſ'), and of the last E.
	for _, i := range []int{2, len(sentinel) - 1} {
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if r >= 0xd800 && r <= 0xdfff {
				continue // no Go string holds a surrogate
			}
			text := sentinel[:i] + string(r) + sentinel[i+1:] + ": x"
			upper := r
			if r < 0x80 {
				upper = unicode.ToUpper(r)
			} else if u, ok := pythonUpperToASCII[r]; ok {
				upper = u
			}
			n, got := sentinelPrefix(text)
			if want := upper == rune(sentinel[i]); got != want {
				t.Fatalf("sentinel with %U at %d: complete = %v, Python says %v", r, i, got, want)
			}
			if got && text[n:] != ": x" {
				t.Fatalf("sentinel with %U at %d: rest %q, want %q", r, i, text[n:], ": x")
			}
		}
	}
}

package config

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Key is the dotted TOML key the problem is about, e.g.
	// "tasks.max_steps" or "executors.myexec.path". It is empty for
	// problems with the file as a whole (syntax, size).
	Key string
	// Message is a complete, human-readable sentence that names the key,
	// says what is wrong and, where it helps, what to do about it.
	Message string
}

// Error reports every problem found in a configuration. Parse and Validate
// return it for any problem, and Load for any problem with the file's content,
// so callers can use errors.As to inspect the problems.
type Error struct {
	// Path is the configuration file, when the configuration came from
	// Load; empty otherwise.
	Path     string
	Problems []Problem
}

// maxErrorLines bounds the text of Error.Error; the Problems slice itself is
// never truncated.
const maxErrorLines = 50

// Error returns the problems one per line, each prefixed with the file path
// (or "config" when there is none).
func (e *Error) Error() string {
	prefix := "config"
	if e.Path != "" {
		prefix = e.Path
	}
	if len(e.Problems) == 0 {
		return prefix + ": invalid configuration"
	}
	var b strings.Builder
	for i, p := range e.Problems {
		if i == maxErrorLines {
			fmt.Fprintf(&b, "\n%s: ... and %d more problems", prefix, len(e.Problems)-i)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(prefix)
		b.WriteString(": ")
		b.WriteString(p.Message)
	}
	return b.String()
}

// problems collects Problems while a configuration is checked.
type problems []Problem

func (ps *problems) add(key, format string, args ...any) {
	*ps = append(*ps, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
}

// keySet holds the keys that already have a problem.
type keySet map[string]bool

func (ps problems) keySet() keySet {
	s := make(keySet, len(ps))
	for _, p := range ps {
		if p.Key != "" {
			s[p.Key] = true
		}
	}
	return s
}

// covers reports whether key, or one of its parents, already has a problem.
// Only the parents within schemaDepth levels are looked at: no problem is
// reported deeper than the schema goes, except unknown keys, which are
// reported at their first unknown level.
func (s keySet) covers(key string) bool {
	if s[key] {
		return true
	}
	// Cut key at each dot that separates parts (not one inside a quoted
	// part, as in executors."a.b").
	quoted, escaped, depth := false, false, 0
	for i := 0; i < len(key) && depth < schemaDepth; i++ {
		switch c := key[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == '.' && !quoted:
			if s[key[:i]] {
				return true
			}
			depth++
		}
	}
	return false
}

// intRange checks lo <= v <= hi.
func (ps *problems) intRange(key string, v, lo, hi int) {
	if v < lo || v > hi {
		ps.add(key, "%s = %d: must be between %d and %d", key, v, lo, hi)
	}
}

// capped checks a budget default and its cap: the cap must be within
// capLo..capHi and the default within lo..cap. If the cap itself is out of
// range, the default is checked against capHi instead.
func (ps *problems) capped(key string, v, lo int, capKey string, capV, capLo, capHi int) {
	capOK := capV >= capLo && capV <= capHi
	switch {
	case !capOK:
		ps.intRange(key, v, lo, capHi)
	case v < lo:
		ps.add(key, "%s = %d: must be between %d and %d (the value of %s)", key, v, lo, capV, capKey)
	case v > capV:
		ps.add(key, "%s = %d: must be between %d and %d, the value of %s; lower %s or raise %s (at most %d)",
			key, v, lo, capV, capKey, key, capKey, capHi)
	}
	ps.intRange(capKey, capV, capLo, capHi)
}

// keyString renders a key path the way TOML would write it, quoting parts
// that are not bare keys.
func keyString(parts ...string) string { return toml.Key(parts).String() }

func executorKey(name string, sub ...string) string {
	return keyString(append([]string{"executors", name}, sub...)...)
}

// quote renders a user-supplied string for a message: quoted, and shortened
// if long, so a message stays one readable line.
func quote(s string) string {
	const max = 64
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q...", s[:cut])
}

// suggest returns the candidate closest to name, or "" if none is close
// enough to be a likely typo.
func suggest(name string, candidates []string) string {
	if len(name) > 64 {
		return ""
	}
	best, bestDist := "", -1
	for _, c := range candidates {
		if strings.EqualFold(c, name) {
			return c
		}
		d := editDistance(name, c)
		limit := 2
		if len(c) >= 10 {
			limit = 3
		}
		near := d <= limit || (len(name) >= 3 && (strings.HasPrefix(c, name) || strings.HasPrefix(name, c)))
		if near && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

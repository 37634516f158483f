package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Fingerprint identifies a tool call for the effect ledger (DESIGN.md §6),
// which replays an observed effect of a re-run step by (seq, fingerprint):
// the SHA-256, in hex, of the tool name and the canonical form of its
// arguments. The canonical form sorts object keys, drops insignificant
// whitespace and normalises string escapes, so the same call encoded
// differently has the same fingerprint; numbers keep their literal form
// ("1" and "1.0" differ). Empty arguments and null count as {}, as they do
// for Call. Arguments that are not valid JSON are hashed as they are, under
// a distinct tag, so they cannot collide with valid ones.
func Fingerprint(name string, args json.RawMessage) string {
	h := sha256.New()
	// The length prefix keeps name and arguments from running into each
	// other.
	fmt.Fprintf(h, "taskhost.tool.v1\n%d:%s\n", len(name), name)
	if canon, err := canonicalJSON(args); err == nil {
		h.Write([]byte("json:"))
		h.Write(canon)
	} else {
		h.Write([]byte("raw:"))
		h.Write(args)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func canonicalJSON(args json.RawMessage) ([]byte, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber() // keep numbers exactly as written rather than round through float64
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // encoding/json sorts map keys
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Summarize returns a bounded (at most MaxSummaryBytes), redacted summary of
// a tool call for step summaries and the effect ledger: the tool name and,
// for each argument, its key and size — never a value. Only the argument
// keys the tool accepts are printed; other keys come from the model and
// could carry anything, so they are only counted. For example
// `shell.run{command:12B,timeout_seconds:2B}`.
func Summarize(name string, args json.RawMessage) string {
	var known []string
	for _, b := range builtins() {
		if b.spec.Name == name {
			known = b.fields
		}
	}
	label := safeName(name)
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return label + "{}"
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &m); err != nil {
		return bound(label + "(invalid:" + byteSize(len(args)) + ")")
	}
	var parts []string
	unknown := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(known, k) {
			unknown++
			continue
		}
		parts = append(parts, k+":"+byteSize(valueSize(m[k])))
	}
	if unknown > 0 {
		parts = append(parts, "+"+strconv.Itoa(unknown)+" unknown")
	}
	return bound(label + "{" + strings.Join(parts, ",") + "}")
}

// safeName keeps a tool name readable and harmless in a summary: a name
// that is not a built-in tool came from an executor and is only trusted as
// far as its shape.
func safeName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < 40; i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('?')
		}
	}
	if b.Len() == 0 {
		return "?"
	}
	return b.String()
}

// valueSize is the size of an argument's value: the bytes of a string's
// content, or the length of any other JSON value's text.
func valueSize(raw json.RawMessage) int {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return len(s)
	}
	return len(bytes.TrimSpace(raw))
}

func byteSize(n int) string {
	switch {
	case n < 1<<10:
		return strconv.Itoa(n) + "B"
	case n < 1<<20:
		return strconv.Itoa(n>>10) + "KiB"
	default:
		return strconv.Itoa(n>>20) + "MiB"
	}
}

func bound(s string) string {
	if len(s) <= MaxSummaryBytes {
		return s
	}
	return s[:MaxSummaryBytes-3] + "..."
}

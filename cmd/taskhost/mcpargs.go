package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/taskhost/taskhost/internal/text"
)

// An mcpParam is one argument of an MCP tool. The same table gives the
// tool's JSON schema (what a client shows its model) and the checks the
// server makes itself, so that a bad argument is refused with a message
// that names the field, its limit and the value, and the two never
// disagree.
type mcpParam struct {
	name     string
	typ      string // "string", "integer", "boolean", "strings" (an array of strings), "object", "any"
	desc     string
	required bool
	maxBytes int      // string: UTF-8 bytes; object and any: bytes of its JSON
	min, max int64    // integer
	def      any      // the default, shown in the schema
	enum     []string // string, or each item of strings
	maxItems int      // strings
}

// mcpInputError is a refused argument.
type mcpInputError struct {
	field, msg string
}

func (e *mcpInputError) Error() string { return e.field + ": " + e.msg }

// maxQuotedValue bounds the part of a refused value a message quotes.
const maxQuotedValue = 64

func quoteValue(raw json.RawMessage) string {
	return text.Clip(string(raw), maxQuotedValue)
}

// schema is the JSON schema of a tool's arguments.
func mcpSchema(params []mcpParam) map[string]any {
	props := map[string]any{}
	required := []string{}
	for _, p := range params {
		s := map[string]any{"description": p.desc}
		switch p.typ {
		case "string":
			s["type"] = "string"
			s["maxLength"] = p.maxBytes // characters in JSON Schema; at most this many bytes is stricter
			if len(p.enum) > 0 {
				s["enum"] = p.enum
			}
		case "integer":
			s["type"] = "integer"
			s["minimum"], s["maximum"] = p.min, p.max
		case "boolean":
			s["type"] = "boolean"
		case "strings":
			item := map[string]any{"type": "string"}
			if len(p.enum) > 0 {
				item["enum"] = p.enum
			}
			s["type"], s["items"], s["maxItems"] = "array", item, p.maxItems
		case "object":
			s["type"] = "object"
		}
		if p.def != nil {
			s["default"] = p.def
		}
		props[p.name] = s
		if p.required {
			required = append(required, p.name)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// mcpArgs are checked arguments, by name.
type mcpArgs map[string]json.RawMessage

// parseMCPArgs checks raw (a tool call's arguments) against params.
func parseMCPArgs(raw json.RawMessage, params []mcpParam) (mcpArgs, error) {
	args := mcpArgs{}
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, &mcpInputError{"arguments", "must be a JSON object: " + err.Error()}
		}
	}
	known := map[string]mcpParam{}
	for _, p := range params {
		known[p.name] = p
	}
	var unknown []string
	for name := range args {
		if _, ok := known[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		names := make([]string, 0, len(params))
		for _, p := range params {
			names = append(names, p.name)
		}
		return nil, &mcpInputError{text.Clip(unknown[0], maxQuotedValue), fmt.Sprintf("unknown argument; this tool takes %s", strings.Join(names, ", "))}
	}
	for _, p := range params {
		v, ok := args[p.name]
		if !ok || string(v) == "null" {
			delete(args, p.name)
			if p.required {
				return nil, &mcpInputError{p.name, "is required"}
			}
			continue
		}
		if err := p.check(v); err != nil {
			return nil, err
		}
	}
	return args, nil
}

func (p mcpParam) check(v json.RawMessage) error {
	fail := func(format string, a ...any) error {
		return &mcpInputError{p.name, fmt.Sprintf(format, a...)}
	}
	switch p.typ {
	case "string":
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return fail("must be a string, not %s", quoteValue(v))
		}
		return p.checkString(p.name, s)
	case "integer":
		// json.Number would take a quoted "3" too: a JSON number only.
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		var n json.Number
		if first := bytes.TrimSpace(v); len(first) == 0 || first[0] == '"' || dec.Decode(&n) != nil {
			return fail("must be an integer, not %s", quoteValue(v))
		}
		i, err := n.Int64()
		if err != nil {
			return fail("must be an integer from %d to %d, not %s", p.min, p.max, quoteValue(v))
		}
		if i < p.min || i > p.max {
			return fail("is %d, outside the limits %d..%d", i, p.min, p.max)
		}
	case "boolean":
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return fail("must be true or false, not %s", quoteValue(v))
		}
	case "strings":
		var ss []string
		if err := json.Unmarshal(v, &ss); err != nil {
			return fail("must be an array of strings, not %s", quoteValue(v))
		}
		if len(ss) > p.maxItems {
			return fail("has %d items, the limit is %d", len(ss), p.maxItems)
		}
		for i, s := range ss {
			if err := p.checkString(fmt.Sprintf("%s[%d]", p.name, i), s); err != nil {
				return err
			}
		}
	case "object", "any":
		if len(v) > p.maxBytes {
			return fail("is %d bytes of JSON, the limit is %d (value %s)", len(v), p.maxBytes, quoteValue(v))
		}
		if p.typ == "object" && !bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
			return fail("must be a JSON object, not %s", quoteValue(v))
		}
	}
	return nil
}

func (p mcpParam) checkString(field, s string) error {
	fail := func(format string, a ...any) error {
		return &mcpInputError{field, fmt.Sprintf(format, a...)}
	}
	q, _ := json.Marshal(text.Clip(s, maxQuotedValue))
	switch {
	case !utf8.ValidString(s):
		return fail("is not valid UTF-8")
	case p.maxBytes > 0 && len(s) > p.maxBytes:
		return fail("is %d bytes, the limit is %d (value %s)", len(s), p.maxBytes, q)
	case len(p.enum) > 0:
		for _, e := range p.enum {
			if s == e {
				return nil
			}
		}
		return fail("is %s: use one of %s", q, strings.Join(p.enum, ", "))
	}
	return nil
}

// str is a string argument, or "" when absent.
func (a mcpArgs) str(name string) string {
	var s string
	_ = json.Unmarshal(a[name], &s) // checked by parseMCPArgs
	return s
}

// int is an integer argument, or def when absent.
func (a mcpArgs) int(name string, def int64) int64 {
	v, ok := a[name]
	if !ok {
		return def
	}
	var n int64
	_ = json.Unmarshal(v, &n) // checked by parseMCPArgs
	return n
}

// bool is a boolean argument, false when absent.
func (a mcpArgs) bool(name string) bool {
	var b bool
	_ = json.Unmarshal(a[name], &b) // checked by parseMCPArgs
	return b
}

// strs is a string-array argument.
func (a mcpArgs) strs(name string) []string {
	var ss []string
	_ = json.Unmarshal(a[name], &ss) // checked by parseMCPArgs
	return ss
}

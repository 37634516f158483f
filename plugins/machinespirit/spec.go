package machinespirit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds of a task spec. The host bounds the spec as a whole; these keep
// each part within what the worker and the prompts are built for.
const (
	maxSpecBytes        = 128 << 10
	maxGoalChars        = 2000
	maxGraphIDBytes     = 64
	maxInputBytes       = 64 << 10
	maxContextFileBytes = 256
)

// taskSpec is a machinespirit task spec:
//
//	{"goal": "...", "machinespirit": {"graph": "rlm", "input": {...}, "context_file": "ctx.txt"}}
//
// graph is required; input (a JSON object) and context_file (a relative
// path in the task's workspace) are optional.
type taskSpec struct {
	Goal        string
	Graph       string
	Input       json.RawMessage // always a JSON object
	ContextFile string          // "" when not given
}

// specError is a spec that cannot run; its message names the field.
type specError struct {
	field string
	msg   string
}

func (e *specError) Error() string { return e.field + ": " + e.msg }

// parseSpec decodes and checks a spec strictly. A misspelt option must fail
// the task that used it, not silently run a default.
func parseSpec(raw []byte) (taskSpec, error) {
	if len(raw) > maxSpecBytes {
		return taskSpec{}, &specError{"spec", fmt.Sprintf("%d bytes, at most %d", len(raw), maxSpecBytes)}
	}
	top, err := object(raw, "spec")
	if err != nil {
		return taskSpec{}, err
	}
	if err := onlyFields(top, "", "goal", "machinespirit"); err != nil {
		return taskSpec{}, err
	}
	var sp taskSpec
	if g, ok := top["goal"]; ok {
		if err := json.Unmarshal(g, &sp.Goal); err != nil {
			return taskSpec{}, &specError{"goal", "must be a string"}
		}
	}
	if n := utf8.RuneCountInString(sp.Goal); n > maxGoalChars {
		return taskSpec{}, &specError{"goal", fmt.Sprintf("%d characters, at most %d", n, maxGoalChars)}
	}
	msRaw, ok := top["machinespirit"]
	if !ok {
		return taskSpec{}, &specError{"machinespirit", "missing: the machinespirit executor needs {\"graph\": ...}"}
	}
	ms, err := object(msRaw, "machinespirit")
	if err != nil {
		return taskSpec{}, err
	}
	if err := onlyFields(ms, "machinespirit.", "graph", "input", "context_file"); err != nil {
		return taskSpec{}, err
	}

	g, ok := ms["graph"]
	if !ok {
		return taskSpec{}, &specError{"machinespirit.graph", "missing"}
	}
	if err := json.Unmarshal(g, &sp.Graph); err != nil {
		return taskSpec{}, &specError{"machinespirit.graph", "must be a string"}
	}
	if !validGraphID(sp.Graph) {
		return taskSpec{}, &specError{"machinespirit.graph", fmt.Sprintf("%q: a graph id is 1..%d lowercase letters, digits and '_', starting with a letter", truncate(sp.Graph, 80), maxGraphIDBytes)}
	}

	sp.Input = json.RawMessage("{}")
	if in, ok := ms["input"]; ok {
		if len(in) > maxInputBytes {
			return taskSpec{}, &specError{"machinespirit.input", fmt.Sprintf("%d bytes, at most %d", len(in), maxInputBytes)}
		}
		if !isJSONObject(in) {
			return taskSpec{}, &specError{"machinespirit.input", "must be a JSON object"}
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, in); err != nil {
			return taskSpec{}, &specError{"machinespirit.input", err.Error()}
		}
		sp.Input = compact.Bytes()
	}

	if cf, ok := ms["context_file"]; ok {
		if err := json.Unmarshal(cf, &sp.ContextFile); err != nil {
			return taskSpec{}, &specError{"machinespirit.context_file", "must be a string"}
		}
		if err := checkContextFile(sp.ContextFile); err != nil {
			return taskSpec{}, &specError{"machinespirit.context_file", err.Error()}
		}
	}
	return sp, nil
}

// object decodes raw as one JSON object, keeping its members raw.
func object(raw []byte, field string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, &specError{field, "must be a JSON object"}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &specError{field, "trailing data after the JSON object"}
	}
	return m, nil
}

// onlyFields refuses any member not in allowed, naming it with prefix.
func onlyFields(m map[string]json.RawMessage, prefix string, allowed ...string) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			return &specError{prefix + truncate(k, 80), fmt.Sprintf("unknown field (known: %s)", strings.Join(allowed, ", "))}
		}
	}
	return nil
}

func validGraphID(id string) bool {
	if id == "" || len(id) > maxGraphIDBytes || id[0] < 'a' || id[0] > 'z' {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// checkContextFile accepts a clean relative path inside the workspace. The
// host's workspace tool is the authority on what may be read; this only
// refuses what can never be right.
func checkContextFile(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case len(p) > maxContextFileBytes:
		return fmt.Errorf("%d bytes, at most %d", len(p), maxContextFileBytes)
	case !utf8.ValidString(p) || strings.ContainsAny(p, "\x00\n\r"):
		return errors.New("must be valid UTF-8 without NUL or newlines")
	case path.IsAbs(p):
		return errors.New("must be relative to the task's workspace")
	case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return errors.New("must be a clean path inside the workspace (no '.', '..' or '//')")
	}
	return nil
}

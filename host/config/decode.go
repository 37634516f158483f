package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// The strict decoder.
//
// toml.Decode straight into Config would stop at the first value of the wrong
// type and would match keys case-insensitively (so "Max_Steps" would pass).
// Instead the document is decoded one table level at a time into
// toml.Primitive values, and each known key is decoded on its own with
// MetaData.PrimitiveDecode into the field of the Config that already holds
// the defaults. That way every unknown key and every wrong type is reported,
// not just the first, and keys must match their `toml` tag exactly.
// MetaData.Undecoded is the final net: any key the walk did not consume is
// reported as unknown.
//
// The keys are discovered from the `toml` tags of Config by reflection: a
// struct field is a table, a map[string]struct field is a table of named
// tables (like [executors.NAME]), and int, bool, string and []string fields
// are values.

// decode decodes data into cfg, which must hold the defaults. It returns the
// problems found; ok is false when data is not TOML at all, in which case
// nothing was decoded.
func decode(data []byte, cfg *Config) (probs problems, ok bool) {
	var top map[string]toml.Primitive
	md, err := toml.Decode(string(data), &top)
	if err != nil {
		return problems{syntaxProblem(err)}, false
	}
	d := &decoder{md: &md, order: childOrder(md.Keys())}
	d.table(nil, top, reflect.ValueOf(cfg).Elem())

	reported := d.probs.keySet()
	for _, k := range md.Undecoded() {
		if ks := k.String(); !reported.covers(ks) {
			d.probs.add(ks, "unknown key %q; remove it", ks)
			reported[ks] = true
		}
	}
	return d.probs, true
}

type decoder struct {
	md    *toml.MetaData
	order map[string][]string // parent key → child names in document order
	probs problems
}

// table decodes the keys of one TOML table into the struct dst.
func (d *decoder) table(key toml.Key, raw map[string]toml.Primitive, dst reflect.Value) {
	fields := tomlFields(dst.Type())
	for _, name := range d.ordered(key, raw) {
		k := child(key, name)
		i := slices.IndexFunc(fields, func(f tomlField) bool { return f.name == name })
		if i < 0 {
			d.unknown(k, fields)
			continue
		}
		d.value(k, raw[name], dst.Field(fields[i].index))
	}
}

// value decodes the TOML value prim, found at key, into dst.
func (d *decoder) value(key toml.Key, prim toml.Primitive, dst reflect.Value) {
	ks := key.String()
	var raw any
	if err := d.md.PrimitiveDecode(prim, &raw); err != nil {
		d.probs.add(ks, "%s: %v", ks, err) // decoding into any cannot fail
		return
	}

	switch dst.Kind() {
	case reflect.Struct:
		if sub, ok := d.subtable(key, prim, raw); ok {
			d.table(key, sub, dst)
		}
		return
	case reflect.Map: // a table of named tables, e.g. [executors.NAME]
		sub, ok := d.subtable(key, prim, raw)
		if !ok {
			return
		}
		if dst.IsNil() {
			dst.Set(reflect.MakeMap(dst.Type()))
		}
		for _, name := range d.ordered(key, sub) {
			// The entry is kept even if it is malformed, so that a
			// reference to it by name does not also fail.
			elem := reflect.New(dst.Type().Elem()).Elem()
			// An entry with defaults (a built-in tool, say) starts from
			// them: the file overrides only the keys it names.
			if old := dst.MapIndex(reflect.ValueOf(name)); old.IsValid() {
				elem.Set(old)
			}
			d.value(child(key, name), sub[name], elem)
			dst.SetMapIndex(reflect.ValueOf(name), elem)
		}
		return
	}

	if msg := checkType(raw, dst.Type()); msg != "" {
		d.probs.add(ks, "%s%s", ks, msg)
		return
	}
	if err := d.md.PrimitiveDecode(prim, dst.Addr().Interface()); err != nil {
		d.probs.add(ks, "%s: %v", ks, err) // checkType should have caught it
	}
}

// subtable decodes prim, found at key, as a table of primitives.
func (d *decoder) subtable(key toml.Key, prim toml.Primitive, raw any) (map[string]toml.Primitive, bool) {
	ks := key.String()
	if _, ok := raw.(map[string]any); !ok {
		d.probs.add(ks, "%s: expected a table (a [%s] section), got %s", ks, ks, describe(raw))
		return nil, false
	}
	var sub map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(prim, &sub); err != nil {
		d.probs.add(ks, "%s: %v", ks, err)
		return nil, false
	}
	return sub, true
}

// unknown reports key, which is not a field of its table.
func (d *decoder) unknown(key toml.Key, fields []tomlField) {
	ks := key.String()
	parent, name := key[:len(key)-1], key[len(key)-1]
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	if s := suggest(name, names); s != "" {
		d.probs.add(ks, "unknown key %q (did you mean %q?)", ks, child(parent, s).String())
		return
	}
	if len(parent) == 0 {
		if home := sectionOf(name); home != "" {
			d.probs.add(ks, "unknown top-level key %q: it belongs in the [%s] section (did you mean %q?)",
				ks, home, keyString(home, name))
			return
		}
		d.probs.add(ks, "unknown key %q; remove it (the top-level tables are: %s)", ks, strings.Join(names, ", "))
		return
	}
	d.probs.add(ks, "unknown key %q; remove it (the keys of [%s] are: %s)", ks, parent, strings.Join(names, ", "))
}

// sectionOf returns the top-level table that has a key called name, or "".
func sectionOf(name string) string {
	t := reflect.TypeFor[Config]()
	for _, sec := range tomlFields(t) {
		st := t.Field(sec.index).Type
		if st.Kind() != reflect.Struct {
			continue
		}
		for _, f := range tomlFields(st) {
			if f.name == name {
				return sec.name
			}
		}
	}
	return ""
}

// ordered returns the keys of raw, a table found at key, in document order.
func (d *decoder) ordered(key toml.Key, raw map[string]toml.Primitive) []string {
	names := make([]string, 0, len(raw))
	seen := make(map[string]bool, len(raw))
	for _, n := range d.order[key.String()] {
		if _, ok := raw[n]; ok && !seen[n] {
			names = append(names, n)
			seen[n] = true
		}
	}
	// Keys the parser did not list (none expected) follow, sorted.
	var rest []string
	for n := range raw {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

// childOrder maps each key (as a string) to the names of its children, in the
// order they first appear in the document.
func childOrder(keys []toml.Key) map[string][]string {
	order := make(map[string][]string)
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		// The parser lists "executors.x" but not the implicit "executors"
		// table, so every prefix is registered too, down to the depth the
		// schema is walked (deeper keys are never looked up, and going
		// further would be quadratic in the depth of a deeply nested key).
		for n := 1; n <= min(len(k), schemaDepth); n++ {
			if full := k[:n].String(); !seen[full] {
				seen[full] = true
				parent := k[:n-1].String()
				order[parent] = append(order[parent], k[n-1])
			}
		}
	}
	return order
}

// child returns key extended by name, never sharing key's backing array.
func child(key toml.Key, name string) toml.Key {
	return append(slices.Clip(key), name)
}

// schemaDepth is how many levels of keys Config has: 4, for
// machine_spirit.handler_modules.NAME.path.
var schemaDepth = keyDepth(reflect.TypeFor[Config]())

// keyDepth returns how many levels of keys the table type t holds.
func keyDepth(t reflect.Type) int {
	if t.Kind() != reflect.Struct { // a map of values, like [principals]
		return 0
	}
	depth := 0
	for _, f := range tomlFields(t) {
		d := 1
		switch ft := t.Field(f.index).Type; ft.Kind() {
		case reflect.Struct:
			d += keyDepth(ft)
		case reflect.Map:
			d += 1 + keyDepth(ft.Elem())
		}
		depth = max(depth, d)
	}
	return depth
}

type tomlField struct {
	name  string // the TOML key
	index int    // the struct field index
}

// tomlFields lists the fields of struct type t by their `toml` tag.
func tomlFields(t reflect.Type) []tomlField {
	fields := make([]tomlField, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			panic(fmt.Sprintf("config: field %s.%s has no toml tag", t, f.Name))
		}
		fields = append(fields, tomlField{name: name, index: i})
	}
	return fields
}

// checkType returns "" if raw, a decoded TOML value, fits a field of type t,
// or else the rest of a message that starts with the key.
func checkType(raw any, t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer: // an optional value: absent leaves it nil
		return checkType(raw, t.Elem())
	case reflect.Float64:
		switch v := raw.(type) {
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return ": expected a finite number, got " + describe(raw)
			}
		case int64:
		default:
			hint := ""
			if s, ok := raw.(string); ok {
				if _, err := strconv.ParseFloat(s, 64); err == nil {
					hint = "; write it without quotes"
				}
			}
			return ": expected number, got " + describe(raw) + hint
		}
	case reflect.Int:
		n, ok := raw.(int64)
		if !ok {
			return ": expected integer, got " + describe(raw) + intHint(raw)
		}
		if int64(int(n)) != n { // only where int is 32 bits
			return fmt.Sprintf(" = %d: too large", n)
		}
	case reflect.Bool:
		if _, ok := raw.(bool); !ok {
			hint := ""
			if s, ok := raw.(string); ok && (s == "true" || s == "false") {
				hint = "; write it without quotes"
			}
			return ": expected boolean (true or false), got " + describe(raw) + hint
		}
	case reflect.String:
		if _, ok := raw.(string); !ok {
			return ": expected string, got " + describe(raw) + stringHint(raw)
		}
	case reflect.Slice:
		if t.Elem().Kind() != reflect.String {
			panic("config: unsupported field type " + t.String())
		}
		arr, ok := raw.([]any)
		if !ok {
			hint := ""
			if _, ok := raw.(string); ok {
				hint = `; write a list, e.g. ["--flag", "value"]`
			}
			return ": expected array of strings, got " + describe(raw) + hint
		}
		for i, v := range arr {
			if _, ok := v.(string); !ok {
				return fmt.Sprintf("[%d]: expected string, got %s%s", i, describe(v), stringHint(v))
			}
		}
	default:
		panic("config: unsupported field type " + t.String())
	}
	return ""
}

func intHint(raw any) string {
	switch v := raw.(type) {
	case string:
		if _, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 0, 64); err == nil {
			return "; write it without quotes"
		}
	case float64:
		if v == math.Trunc(v) {
			return "; write it without a decimal point"
		}
	}
	return ""
}

func stringHint(raw any) string {
	switch raw.(type) {
	case int64, float64, bool:
		return "; put it in double quotes"
	}
	return ""
}

// describe names the TOML type of a decoded value, with the value if it is a
// scalar.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return "string " + quote(v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			return fmt.Sprintf("float %.1f", v)
		}
		return fmt.Sprintf("float %g", v)
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case map[string]any:
		return "table"
	case []map[string]any:
		return "array of tables"
	case []any:
		return "array"
	case time.Time:
		return "datetime"
	default:
		return fmt.Sprintf("value of type %T", v)
	}
}

// syntaxProblem turns an error from the TOML parser into a Problem.
func syntaxProblem(err error) Problem {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return Problem{Message: "not valid TOML: " + err.Error()}
	}
	msg := fmt.Sprintf("TOML syntax error at line %d, column %d: %s", pe.Position.Line, pe.Position.Col, pe.Message)
	if pe.LastKey != "" {
		msg += fmt.Sprintf(" (after key %q)", pe.LastKey)
	}
	return Problem{Message: msg}
}

package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// testBaseDir is the base directory given to Parse in tests that do not care.
const testBaseDir = "/etc/taskhost"

func parse(t *testing.T, src string) (Config, error) {
	t.Helper()
	return Parse([]byte(src), testBaseDir)
}

func mustParse(t *testing.T, src string) Config {
	t.Helper()
	cfg, err := parse(t, src)
	if err != nil {
		t.Fatalf("Parse(%q) failed:\n%v", src, err)
	}
	return cfg
}

// asError returns err as an *Error, failing the test if it is not one or if
// it has no problems.
func asError(t *testing.T, err error) *Error {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error, got nil")
	}
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error is %T, not *Error: %v", err, err)
	}
	if len(cerr.Problems) == 0 {
		t.Fatalf("*Error without problems: %v", err)
	}
	return cerr
}

// wantProblem asserts that err holds a problem about key whose message
// contains every string in contains, and returns all the problems.
func wantProblem(t *testing.T, err error, key string, contains ...string) []Problem {
	t.Helper()
	cerr := asError(t, err)
	for _, p := range cerr.Problems {
		if p.Key != key {
			continue
		}
		ok := true
		for _, s := range contains {
			if !strings.Contains(p.Message, s) {
				ok = false
			}
		}
		if ok {
			return cerr.Problems
		}
	}
	t.Fatalf("no problem with key %q containing %q; got:\n%v", key, contains, err)
	return nil
}

// wantOnly is wantProblem plus: that is the only problem.
func wantOnly(t *testing.T, err error, key string, contains ...string) Problem {
	t.Helper()
	ps := wantProblem(t, err, key, contains...)
	if len(ps) != 1 {
		t.Fatalf("want exactly one problem (about %q), got %d:\n%v", key, len(ps), err)
	}
	return ps[0]
}

// tagName is the TOML key of a struct field.
func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return name
}

// sectionKeys lists "section.key" for every field of the fixed sections
// (struct-typed fields of Config) whose Go kind is kind.
func sectionKeys(kind reflect.Kind) []string {
	var keys []string
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		sec := ct.Field(i)
		if sec.Type.Kind() != reflect.Struct {
			continue
		}
		for j := range sec.Type.NumField() {
			f := sec.Type.Field(j)
			if f.Type.Kind() == kind {
				keys = append(keys, tagName(sec)+"."+tagName(f))
			}
		}
	}
	return keys
}

// fieldAt returns the field of cfg that holds the "section.key" key.
func fieldAt(t *testing.T, cfg *Config, key string) reflect.Value {
	t.Helper()
	section, name, _ := strings.Cut(key, ".")
	v := reflect.ValueOf(cfg).Elem()
	for i := range v.NumField() {
		if tagName(v.Type().Field(i)) != section {
			continue
		}
		sv := v.Field(i)
		for j := range sv.NumField() {
			if tagName(sv.Type().Field(j)) == name {
				return sv.Field(j)
			}
		}
	}
	t.Fatalf("Config has no field for key %q", key)
	return reflect.Value{}
}

// splitKey splits "section.key".
func splitKey(key string) (section, name string) {
	section, name, _ = strings.Cut(key, ".")
	return section, name
}

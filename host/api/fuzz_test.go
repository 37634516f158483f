package api

import (
	"strings"
	"testing"
)

// FuzzRequestValidation: the id and page-token checks never panic, and what
// they accept is within the bounds the rest of the server relies on.
func FuzzRequestValidation(f *testing.F) {
	for _, s := range []string{"t_abc", "", "a_x-y", strings.Repeat("a", 200), "t_\x00", "../etc", "123", "-1", "99999999999999999999999"} {
		f.Add(s)
	}
	pages, err := newPageCipher()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pages.seal("me", "", cursor{seq: 7}))
	f.Fuzz(func(t *testing.T, s string) {
		if err := checkID("task_id", s); err == nil {
			if s == "" || len(s) > maxIDBytes || strings.ContainsAny(s, "/.\x00 ") {
				t.Fatalf("checkID accepted %q", s)
			}
		}
		// Only a token sealed for "me" opens, and only as "me".
		if n, err := pages.open("me", "", s); err == nil && s != "" {
			if n.seq <= 0 {
				t.Fatalf("open(%q) = %+v, accepted", s, n)
			}
			if _, err := pages.open("other", "", s); err == nil {
				t.Fatalf("open(%q) accepted for another principal", s)
			}
			if _, err := pages.open("me", "-created", s); err == nil {
				t.Fatalf("open(%q) accepted for another listing", s)
			}
		}
	})
}

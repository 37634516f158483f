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
	f.Fuzz(func(t *testing.T, s string) {
		if err := checkID("task_id", s); err == nil {
			if s == "" || len(s) > maxIDBytes || strings.ContainsAny(s, "/.\x00 ") {
				t.Fatalf("checkID accepted %q", s)
			}
		}
		if n, err := pageToken(s); err == nil && s != "" && n <= 0 {
			t.Fatalf("pageToken(%q) = %d, accepted", s, n)
		}
	})
}

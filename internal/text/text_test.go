package text

import (
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"shorter than the limit", "abc", 4, "abc"},
		{"at the limit", "abcd", 4, "abcd"},
		{"one past the limit", "abcde", 4, "abcd"},
		{"zero limit", "abc", 0, ""},
		{"negative limit", "abc", -1, ""},
		{"empty", "", 0, ""},
		{"cut inside a two-byte rune", "aé", 2, "a"},
		{"cut after a two-byte rune", "aéb", 3, "aé"},
		{"cut inside a four-byte rune", "😀x", 3, ""},
		{"invalid UTF-8 is cut by bytes", "\xff\xfe\xfd", 2, "\xff\xfe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Truncate(tt.s, tt.n)
			if got != tt.want {
				t.Fatalf("Truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
			if utf8.ValidString(tt.s) && !utf8.ValidString(got) {
				t.Errorf("Truncate(%q, %d) = %q split a rune", tt.s, tt.n, got)
			}
		})
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"abcd", 4, "abcd"},
		{"abcde", 4, "abcd..."},
		{"aé", 2, "a..."},
		{"abc", 0, "..."},
	}
	for _, tt := range tests {
		if got := Clip(tt.s, tt.n); got != tt.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

func TestTruncateRunes(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"héllo", 5, "héllo"},
		{"héllo", 6, "héllo"},
		{"héllo", 2, "hé"},
		{"😀😀", 1, "😀"},
		{"abc", 0, ""},
		{"abc", -3, ""},
	}
	for _, tt := range tests {
		if got := TruncateRunes(tt.s, tt.n); got != tt.want {
			t.Errorf("TruncateRunes(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host"
)

// TestReadInputScript holds `taskhost run --input-values` to its bounds, at
// each limit and one past it; the conformance kit's tests run the flag end
// to end (sdk/executortest, the inputs_short case and the passing kit).
func TestReadInputScript(t *testing.T) {
	values := func(n int, v string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(v+",", n), ",") + "]"
	}
	str := func(n int) string { return `"` + strings.Repeat("x", n-2) + `"` } // n bytes of JSON
	cases := []struct {
		name    string
		content string
		want    int // values read, when no error
		wantErr string
	}{
		{"empty array", `[]`, 0, ""},
		{"values of each kind", `["main", 3, {"a": [1, 2]}, null, true]`, 5, ""},
		{"64 values", values(maxInputValues, "1"), maxInputValues, ""},
		{"65 values", values(maxInputValues+1, "1"), 0, "holds 65 values, the limit is 64"},
		{"a value of 64 KiB", "[" + str(host.MaxInputValue) + "]", 1, ""},
		{"a value a byte over", "[" + str(host.MaxInputValue+1) + "]", 0, "value 1 is 65537 bytes, the limit is 65536"},
		{"64 values of 64 KiB", values(maxInputValues, str(host.MaxInputValue)), maxInputValues, ""},
		{"null", `null`, 0, "not null ([] rejects every question)"},
		{"an object", `{"a": 1}`, 0, "must hold one JSON array of the answers"},
		{"not JSON", `[1,`, 0, "must hold one JSON array of the answers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "answers.json")
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := readInputScript(path)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("readInputScript: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("readInputScript: %v\nwant an error with %q", err, c.wantErr)
			case c.wantErr == "" && len(s.values) != c.want:
				t.Fatalf("read %d values, want %d", len(s.values), c.want)
			case c.wantErr != "" && !strings.Contains(err.Error(), "--input-values"):
				t.Fatalf("the error %q does not name the flag", err)
			}
		})
	}
}

// TestInspectEffectsUsage: the ledger is one task's, in JSON only.
func TestInspectEffectsUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"inspect", "--data-dir", dir, "--effects", "--json"},
		{"inspect", "--data-dir", dir, "--effects", "t_1"},
	} {
		_, stderr, code := runCLI(t, "", args...)
		if code != exitUsage || !strings.Contains(stderr, "--effects needs one task ID and --json") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and the usage", args, code, stderr, exitUsage)
		}
	}
}

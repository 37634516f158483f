package executortest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestValidateFiles checks that Options.Files is held to the host's seed
// limits before any check runs, each refusal naming the scenario, the file
// and the limit, and that files at every limit pass.
func TestValidateFiles(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	many := func(n int) map[string][]byte {
		m := map[string][]byte{}
		for i := range n {
			m[fmt.Sprintf("f%02d", i)] = []byte("x")
		}
		return m
	}
	cases := []struct {
		name    string
		files   map[string][]byte
		wantErr string // empty: valid
	}{
		{"nil", nil, ""},
		{"nested", map[string][]byte{"a/b/c.txt": []byte("c")}, ""},
		{"16 files", many(maxSeedFiles), ""},
		{"17 files", many(maxSeedFiles + 1), `Options.Files("crash") has 17 files, the limit is 16`},
		{"name of 255 bytes", map[string][]byte{strings.Repeat("n", maxSeedName): nil}, ""},
		{"name of 256 bytes", map[string][]byte{strings.Repeat("n", maxSeedName+1): nil}, "is 256 bytes: a name must be 1 to 255 bytes"},
		{"empty name", map[string][]byte{"": nil}, `the name "" is 0 bytes`},
		{"absolute", map[string][]byte{"/etc/passwd": nil}, `the name "/etc/passwd" is not a clean relative path`},
		{"parent", map[string][]byte{"../up": nil}, `the name "../up" is not a clean relative path`},
		{"unclean", map[string][]byte{"a//b": nil}, `the name "a//b" is not a clean relative path`},
		{"dot", map[string][]byte{".": nil}, `the name "." is not a clean relative path`},
		{"NUL", map[string][]byte{"a\x00b": nil}, `is not a clean relative path`},
		{"16 MiB together", map[string][]byte{"a": make([]byte, maxSeedBytes/2), "b": make([]byte, maxSeedBytes/2)}, ""},
		{"a byte over 16 MiB", map[string][]byte{"a": make([]byte, maxSeedBytes/2), "b": make([]byte, maxSeedBytes/2+1)}, "hold 16777217 bytes together, the limit is 16777216"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Options{
				Binary: self, Kind: "k", TaskhostBin: self,
				Spec: func(string) map[string]any { return map[string]any{} },
				Files: func(scenario string) map[string][]byte {
					if scenario == ScenarioCrash {
						return c.files
					}
					return nil
				},
			}
			_, err := o.validate()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case c.wantErr != "" && err == nil:
				t.Fatalf("validate passed, want an error with %q", c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Fatalf("validate: %v\nwant it to contain %q", err, c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), `Options.Files("crash")`):
				t.Fatalf("validate: %v\nwant it to name Options.Files(\"crash\")", err)
			}
		})
	}
}

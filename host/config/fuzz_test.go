package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error is an *Error
// with at least one non-empty problem, and that whatever it accepts is valid
// and parses the same way twice.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "example.toml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(example),
		"",
		"[tasks]\nmax_steps = 300\nmax_stepz = 1\n",
		"[tasks]\nmax_concurrent = \"two\"\nenabled = 1\n",
		"tasks = 5\n[[limits]]\n",
		"[tasks]\nexecutor = \"machinespirit\"\n[machine_spirit]\nenabled = true\nswipl_path = \"swipl\"\n",
		"[executors.mine]\npath = \"plugins/mine\"\nsha256 = \"00\"\nargs = [\"-v\", 1]\n",
		"[executors]\n\"my exec\" = 5\nlegacy = {}\n",
		"a.b.c = {d = [1, {e = 2}]}\n",
		"[tasks\n",
		"[limits]\ngrpc_message_bytes = 9223372036854775807\nrecent_summaries = 9223372036854775807\nsummary_chars = 9223372036854775807\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "/etc/taskhost")
		if err != nil {
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error is %T, not *Error: %v", err, err)
			}
			if len(cerr.Problems) == 0 {
				t.Fatal("*Error without problems")
			}
			for _, p := range cerr.Problems {
				if p.Message == "" {
					t.Fatalf("empty message in %+v", cerr.Problems)
				}
			}
			if err.Error() == "" {
				t.Fatal("empty Error()")
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects:\n%v", err)
		}
		again, err := Parse(data, "/etc/taskhost")
		if err != nil || !reflect.DeepEqual(cfg, again) {
			t.Fatalf("second Parse differs: %v", err)
		}
	})
}

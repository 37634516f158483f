package config

import (
	"fmt"
	"strings"
	"testing"
)

// shell.run's bounds are checked at and one past each end of their range,
// the error naming the key and the range; another tool may set none of
// them, nor network.
func TestShellRunLimitRanges(t *testing.T) {
	for _, k := range []struct {
		key      string
		min, max int
	}{
		{"max_processes", 16, 65536},
		{"max_memory_mb", 64, 1 << 20},
		{"max_cpu_seconds", 1, 86400},
		{"max_file_mb", 1, 65536},
		{"command_memory_mb", 128, 1 << 20},
		{"command_cpu_percent", 1, 6400},
	} {
		for _, c := range []struct {
			v  int
			ok bool
		}{{k.min, true}, {k.max, true}, {k.min - 1, false}, {k.max + 1, false}} {
			_, err := parse(t, fmt.Sprintf("[tools.\"shell.run\"]\n%s = %d\n", k.key, c.v))
			if c.ok && err != nil {
				t.Errorf("%s = %d refused: %v", k.key, c.v, err)
			}
			if !c.ok && (err == nil || !strings.Contains(err.Error(), `tools."shell.run".`+k.key) ||
				!strings.Contains(err.Error(), fmt.Sprintf("between %d and %d", k.min, k.max))) {
				t.Errorf("%s = %d: %v, want refused naming the key and its range", k.key, c.v, err)
			}
		}
	}
	for _, src := range []string{"[tools.\"time.sleep\"]\nnetwork = true\n", "[tools.\"workspace.read\"]\nmax_file_mb = 5\n",
		"[tools.\"workspace.write\"]\ncommand_memory_mb = 512\n", "[tools.\"time.sleep\"]\ncommand_cpu_percent = 50\n"} {
		if _, err := parse(t, src); err == nil {
			t.Errorf("%q accepted: only shell.run has these keys", src)
		}
	}
}

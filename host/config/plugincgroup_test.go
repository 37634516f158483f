package config

import (
	"fmt"
	"strings"
	"testing"
)

// A plugin's cgroup limits ([confinement] memory_mb and cpu_percent, the
// built-in executors' and the default of [executors.NAME]'s) are checked at
// and one past each end of their range, the error naming the key, the
// range and the value; 0 in an [executors.NAME] section takes
// [confinement]'s.
func TestPluginCgroupLimitRanges(t *testing.T) {
	for _, k := range []struct {
		key      string
		min, max int
	}{
		{"memory_mb", 64, 1 << 20},
		{"cpu_percent", 1, 6400},
	} {
		for _, sec := range []struct{ head, prefix string }{
			{"[confinement]\n", "confinement."},
			{"[executors.x]\npath = \"/opt/x\"\n", "executors.x."},
		} {
			for _, c := range []struct {
				v  int
				ok bool
			}{{k.min, true}, {k.max, true}, {k.min - 1, k.min-1 == 0 && sec.prefix != "confinement."}, {k.max + 1, false}} {
				_, err := parse(t, fmt.Sprintf("%s%s = %d\n", sec.head, k.key, c.v))
				if c.ok && err != nil {
					t.Errorf("%s%s = %d refused: %v", sec.prefix, k.key, c.v, err)
				}
				if !c.ok && (err == nil || !strings.Contains(err.Error(), sec.prefix+k.key) ||
					!strings.Contains(err.Error(), fmt.Sprintf("between %d and %d", k.min, k.max)) ||
					!strings.Contains(err.Error(), fmt.Sprint(c.v))) {
					t.Errorf("%s%s = %d: %v, want refused naming the key, its range and the value", sec.prefix, k.key, c.v, err)
				}
			}
		}
	}
	d := Default().Confinement
	if d.MemoryMB != 2048 || d.CPUPercent != 100 || d.MaxProcesses != 4096 {
		t.Errorf("[confinement] defaults: memory_mb %d, cpu_percent %d, max_processes %d; want 2048, 100, 4096", d.MemoryMB, d.CPUPercent, d.MaxProcesses)
	}
}

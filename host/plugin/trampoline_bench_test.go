package plugin

import (
	"context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/internal/testwait"
)

// trampolines builds the two binaries a host may start plugins through;
// TestMain removes them once trampolinesBuilt.
var (
	trampolines      = testbin.Lazy("thtr", testbin.Build{Package: testbin.Taskhost}, testbin.Build{Package: testbin.Confine})
	trampolinesBuilt atomic.Bool
)

// BenchmarkLaunchTrampoline measures a plugin start to its first reply
// (Launch and Describe of the test executor, confined) through the whole
// taskhost binary and through taskhost-confine, in the same run, and
// reports their medians and ratio.
func BenchmarkLaunchTrampoline(b *testing.B) {
	dir, err := trampolines()
	trampolinesBuilt.Store(true)
	if err != nil {
		b.Fatalf("build the trampolines: %v", err)
	}
	spec := PluginSpec{Kind: "testexec", Path: testexecBin(b), Confine: DefaultConfinement()}
	n := max(b.N, 20)
	median := func(name string) time.Duration {
		reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(b), "p"), Trampoline: filepath.Join(dir, name)})
		if err != nil {
			b.Fatal(err)
		}
		defer reg.Close()
		took := make([]time.Duration, n)
		for i := range took {
			start := time.Now()
			ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
			if err != nil {
				b.Fatalf("launch through %s: %v", name, err)
			}
			if _, err := ec.Describe(context.Background()); err != nil {
				b.Fatalf("describe through %s: %v", name, err)
			}
			took[i] = time.Since(start)
			ec.Stop()
		}
		slices.Sort(took)
		return took[n/2]
	}
	b.ResetTimer()
	whole, small := median("taskhost"), median("taskhost-confine")
	b.ReportMetric(float64(whole.Microseconds()), "taskhost-µs")
	b.ReportMetric(float64(small.Microseconds()), "confine-µs")
	b.ReportMetric(float64(small)/float64(whole), "ratio")
}

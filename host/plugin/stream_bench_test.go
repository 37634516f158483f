package plugin

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// progressOK is served to a benchmarked plugin: progress notes are taken,
// everything else refused.
type progressOK struct{ NoServices }

func (progressOK) Progress(context.Context, string, string) error { return nil }

// BenchmarkProgressRoundTrip measures one host-service round trip from a
// real, confined plugin: the median of a step of the test executor that
// makes one Progress call less the median of the same step without it,
// steps of both kinds interleaved in the same run.
func BenchmarkProgressRoundTrip(b *testing.B) {
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(b), "p")})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	spec := PluginSpec{Kind: "testexec", Path: testexecBin(b), Confine: DefaultConfinement()}
	ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(progressOK{}))
	if err != nil {
		b.Fatal(err)
	}
	defer ec.Stop()
	n := max(b.N, 500)
	step := func(progress bool) time.Duration {
		s := `{"goal":"g","testexec":{"progress":false}}`
		if progress {
			s = `{"goal":"g","testexec":{"progress":true}}`
		}
		start := time.Now()
		res, err := ec.Step(context.Background(), StepRequest{TaskID: "t", Attempt: 1, TurnToken: "tok", Spec: []byte(s)})
		if err != nil || res.Outcome == OutcomeFail {
			b.Fatalf("step: (%+v, %v)", res, err)
		}
		return time.Since(start)
	}
	with, without := make([]time.Duration, n), make([]time.Duration, n)
	b.ResetTimer()
	for i := range n {
		without[i], with[i] = step(false), step(true)
	}
	slices.Sort(with)
	slices.Sort(without)
	b.ReportMetric(float64(without[n/2].Microseconds()), "step-µs")
	b.ReportMetric(float64((with[n/2] - without[n/2]).Microseconds()), "progress-µs")
}

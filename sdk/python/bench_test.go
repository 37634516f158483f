package python_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/internal/testwait"
)

// progressOK takes progress notes and refuses everything else.
type progressOK struct{ plugin.NoServices }

func (progressOK) Progress(context.Context, string, string) error { return nil }

// BenchmarkPythonVsGo measures, in one run and interleaved, the Python
// probe against the Go test executor, both confined as the daemon runs
// them: a cold start to the first reply (launch, handshake, Describe), a
// step's round trip (a step that makes no call), and a progress call's
// round trip from the plugin (a step with one, less one without). Medians.
func BenchmarkPythonVsGo(b *testing.B) {
	needPythonB(b)
	goDir, err := testbin.TempDir(context.Background(), "thpyb", testbin.Executor("testexec", testbin.Testexec))
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(goDir)
	sdkDir, protoDir := stagedSDK(b)
	reg, err := plugin.NewRegistry(plugin.PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(b), "p")})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	py := plugin.PluginSpec{Kind: "probe", Path: filepath.Join(sdkDir, "testdata", "probe.py"), Interpreter: python,
		Args: []string{"--pythonpath=" + sdkDir}, Confine: plugin.DefaultConfinement()}
	py.Confine.ReadOnly = []string{sdkDir, protoDir}
	goSpec := plugin.PluginSpec{Kind: "testexec", Path: filepath.Join(goDir, "taskhost-executor-testexec"), Confine: plugin.DefaultConfinement()}
	ctx := context.Background()
	for _, s := range []plugin.PluginSpec{py, goSpec} {
		if err := reg.Register(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	kinds := []struct {
		kind        string
		bare, prog  string
		start, step []time.Duration
		progress    []time.Duration
	}{
		{kind: "probe", bare: `{"probe":{"do":"nothing"}}`, prog: `{"probe":{"do":"progress"}}`},
		{kind: "testexec", bare: `{"testexec":{"progress":false}}`, prog: `{"testexec":{"progress":true}}`},
	}
	const starts, steps = 10, 300
	for range starts {
		for i := range kinds {
			k := &kinds[i]
			t0 := time.Now()
			ec, err := reg.Launch(ctx, k.kind, progressOK{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ec.Describe(ctx); err != nil {
				b.Fatal(err)
			}
			k.start = append(k.start, time.Since(t0))
			ec.Stop()
		}
	}
	for i := range kinds {
		k := &kinds[i]
		ec, err := reg.Launch(ctx, k.kind, progressOK{})
		if err != nil {
			b.Fatal(err)
		}
		defer ec.Stop()
		run := func(spec string) time.Duration {
			var o map[string]any
			_ = json.Unmarshal([]byte(spec), &o)
			o["goal"] = "g"
			data, _ := json.Marshal(o)
			t0 := time.Now()
			res, err := ec.Step(ctx, plugin.StepRequest{TaskID: "t", Attempt: 1, TurnToken: "tok", Spec: data})
			if err != nil || res.Outcome == plugin.OutcomeFail {
				b.Fatalf("%s step: %+v, %v", k.kind, res, err)
			}
			return time.Since(t0)
		}
		for range steps {
			bare, prog := run(k.bare), run(k.prog)
			k.step = append(k.step, bare)
			k.progress = append(k.progress, prog)
		}
	}
	median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	for _, k := range kinds {
		st, bare, prog := median(k.start), median(k.step), median(k.progress)
		b.Logf("%-8s start to first reply %v, step round trip %v, progress call %v (medians of %d starts, %d steps)", k.kind, st, bare, prog-bare, starts, steps)
		b.ReportMetric(float64(st.Microseconds()), k.kind+"-start-µs")
		b.ReportMetric(float64(bare.Microseconds()), k.kind+"-step-µs")
		b.ReportMetric(float64((prog - bare).Microseconds()), k.kind+"-progress-µs")
	}
}

package datadir

import (
	"slices"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
)

// [machine_spirit.handler_modules.NAME] reaches the plugin as
// --handler-module PATH=SHA256 flags in name order, and each file is one
// the plugin's Landlock lets it read.
func TestMachineSpiritHandlerModuleArgs(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.MachineSpirit.Enabled = true
	pinA, pinB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	cfg.MachineSpirit.HandlerModules = map[string]config.HandlerModule{
		"zeta":  {Path: "/etc/taskhost/z.pl", SHA256: pinB},
		"alpha": {Path: "/etc/taskhost/a.pl", SHA256: pinA},
	}
	s := machineSpiritSpec(t, cfg)
	args := strings.Join(s.Args, " ")
	want := "--handler-module /etc/taskhost/a.pl=" + pinA + " --handler-module /etc/taskhost/z.pl=" + pinB
	if !strings.Contains(args, want) {
		t.Fatalf("args %q: want %q", args, want)
	}
	for _, p := range []string{"/etc/taskhost/a.pl", "/etc/taskhost/z.pl"} {
		if !slices.Contains(s.Confine.ReadOnly, p) {
			t.Errorf("read_only %q: %s missing", s.Confine.ReadOnly, p)
		}
	}
}

// [machine_spirit] graphs_dir and graph_pins reach the plugin as
// --graphs-dir DIR and --graph-pin ID=SHA256 in id order, and the dir is
// one the plugin's Landlock lets it read.
func TestMachineSpiritGraphPinArgs(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.MachineSpirit.Enabled = true
	pinA, pinB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	cfg.MachineSpirit.GraphsDir = "/etc/taskhost/graphs"
	cfg.MachineSpirit.GraphPins = map[string]string{"review": pinB, "plan": pinA}
	s := machineSpiritSpec(t, cfg)
	args := strings.Join(s.Args, " ")
	want := "--graphs-dir /etc/taskhost/graphs --graph-pin plan=" + pinA + " --graph-pin review=" + pinB
	if !strings.Contains(args, want) {
		t.Fatalf("args %q: want %q", args, want)
	}
	if !slices.Contains(s.Confine.ReadOnly, "/etc/taskhost/graphs") {
		t.Errorf("read_only %q: the graphs dir missing", s.Confine.ReadOnly)
	}
}

// machineSpiritSpec is the plugin spec the daemon builds for machinespirit
// from cfg.
func machineSpiritSpec(t *testing.T, cfg config.Config) plugin.PluginSpec {
	t.Helper()
	specs, err := executorSpecs(fakeExecutorDir(t), testwait.ShortTempDir(t), "", false, cfg)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(specs, func(s plugin.PluginSpec) bool { return s.Kind == config.ExecutorMachineSpirit })
	if i < 0 {
		t.Fatal("no machinespirit spec")
	}
	return specs[i]
}

// machinespirit is started with its own bound on a step's model calls,
// which defaults to the host's ([tasks] max_parallel_model_calls).
func TestMachineSpiritParallelArg(t *testing.T) {
	t.Parallel()
	three := 3
	for _, tc := range []struct {
		name  string
		tasks int
		own   *int
		want  string
	}{
		{"the host's default", 4, nil, "--max-parallel-model-calls 4"},
		{"the host's own", 7, nil, "--max-parallel-model-calls 7"},
		{"its own, lower", 7, &three, "--max-parallel-model-calls 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.MachineSpirit.Enabled = true
			cfg.Tasks.MaxParallelModelCalls, cfg.MachineSpirit.MaxParallelModelCalls = tc.tasks, tc.own
			if args := strings.Join(machineSpiritSpec(t, cfg).Args, " "); !strings.Contains(args, tc.want+" ") && !strings.HasSuffix(args, tc.want) {
				t.Fatalf("args %q: want %q", args, tc.want)
			}
		})
	}
}

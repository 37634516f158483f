package datadir

import (
	"reflect"
	"slices"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/testwait"
)

func TestConfinementFromConfig(t *testing.T) {
	def := config.Default().Confinement
	tests := []struct {
		name string
		ex   config.Executor
		want plugin.Confinement
	}{
		{"defaults", config.Executor{}, plugin.Confinement{Rlimits: confine.Rlimits{AddressSpace: 4096 << 20, NoFile: 1024, NProc: 4096},
			Cgroup: cgroups.Limits{MemoryBytes: 2048 << 20, Pids: 4096, CPUPercent: 100}, DiskBytes: 1024 << 20, OwnUID: true}},
		{"own", config.Executor{MaxAddressSpaceMB: 512, MaxOpenFiles: 64, MaxProcesses: 16, MemoryMB: 96, CPUPercent: 250, DiskMB: 32, User: "nobody", ReadWrite: []string{"/srv/x"}, Subprocesses: true},
			plugin.Confinement{Rlimits: confine.Rlimits{AddressSpace: 512 << 20, NoFile: 64, NProc: 16},
				Cgroup: cgroups.Limits{MemoryBytes: 96 << 20, Pids: 16, CPUPercent: 250}, DiskBytes: 32 << 20, User: "nobody", ReadWrite: []string{"/srv/x"}, Subprocesses: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := confinementFrom(def, tt.ex); !reflect.DeepEqual(c, tt.want) {
				t.Fatalf("confinementFrom = %+v, want %+v", c, tt.want)
			}
		})
	}
}

// Every plugin's spec asks, under a root daemon, for a uid of its own;
// only an executor that names a user of its own runs as that user.
func TestEveryPluginSpecTakesItsOwnUID(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Executors["named"] = config.Executor{Path: "/bin/true", User: "nobody"}
	cfg.MachineSpirit.Enabled = true
	specs, err := executorSpecs(fakeExecutorDir(t), testwait.ShortTempDir(t), "", true, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if want := s.Kind != "named"; s.Confine.OwnUID != want {
			t.Errorf("%s: OwnUID %v, want %v", s.Kind, s.Confine.OwnUID, want)
		}
		if slices.Contains(s.Args, "--state-cache-dir") {
			t.Errorf("%s: args %q: a pooled plugin is given a cache its uid could write", s.Kind, s.Args)
		}
		if s.Kind == config.ExecutorMachineSpirit && s.Confine.SeedCache == "" {
			t.Errorf("machinespirit: no seed cache: every start would compile its saved state")
		}
	}
}

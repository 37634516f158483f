package datadir

import (
	"context"
	"path/filepath"

	"github.com/taskhost/taskhost/host/config"
)

const machineSpiritDisabled = "machinespirit is disabled: set [machine_spirit] enabled = true in the config to use it"

// ReloadExecutors applies cfg's executor settings — [executors.NAME] (path,
// arguments, sha256 pin, confinement) and [machine_spirit] enabled — without
// a restart: every executor is checked again against its binary and the
// new verdicts replace the old at once. Tasks running keep their plugin
// process, started from the binary pinned when they started, until their
// run ends. Nothing else of cfg is applied: other settings need a restart.
func (d *Dir) ReloadExecutors(ctx context.Context, cfg config.Config) error {
	specs, err := executorSpecs(d.executorDir, filepath.Join(d.Path, CacheDirName), d.TrampolinePath(), d.Registry.OwnUIDs(), cfg)
	if err != nil {
		return err
	}
	disabled := map[string]string{}
	if !cfg.MachineSpirit.Enabled {
		disabled["machinespirit"] = machineSpiritDisabled
	}
	d.Registry.Reload(ctx, specs, disabled)
	return nil
}

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
)

// fleetHosts is how many hosts share the store in the fleet row, and
// fleetTasks how many tasks step at once there, spread evenly over them
// (and all on one host for the baseline).
const (
	fleetHosts = 3
	fleetTasks = 12
)

// fleetRows measures fleetTasks tasks stepping at once on h alone and
// spread over h and fleetHosts-1 more hosts opened on h's store (one
// process, one machine), in interleaved rounds, and returns a row for
// each and the median over rounds of the fleet's steps/s over the lone
// host's (target ≥ 1: more hosts on one machine are never slower).
func fleetRows(ctx context.Context, cfg config.Config, dir, executorDir string, h *host.Host, who, gates string, n int) ([]Figure, float64, error) {
	hs := []*host.Host{h}
	defer func() {
		for _, o := range hs[1:] {
			o.Close(context.WithoutCancel(ctx))
		}
	}()
	for i := 1; i < fleetHosts; i++ {
		o, err := openFleetHost(ctx, cfg, filepath.Join(dir, fmt.Sprintf("fleet%d", i)), executorDir, h.DataDir)
		if err != nil {
			return nil, 0, fmt.Errorf("fleet host %d: %w", i+1, err)
		}
		hs = append(hs, o)
	}
	ms, err := interleaved(ctx, who, gates, n, []setup{{hosts: hs[:1], tasks: fleetTasks}, {hosts: hs, tasks: fleetTasks}})
	if err != nil {
		return nil, 0, err
	}
	one := figure(fmt.Sprintf("durable step, %d tasks on 1 host", fleetTasks), ms[0].intervals, fmt.Sprintf("%.0f steps/s in all%s", ms[0].rate, cpuBound(ms[0].cpuPerStep)))
	all := figure(fmt.Sprintf("durable step, %d tasks over %d hosts (one store, one machine)", fleetTasks, fleetHosts), ms[1].intervals,
		fmt.Sprintf("%.0f steps/s in all = %.2f× one host's in the same rounds (target ≥ 1×)%s", ms[1].rate, ms[1].ratio, cpuBound(ms[1].cpuPerStep)))
	return []Figure{one, all}, ms[1].ratio, nil
}

// openFleetHost opens another host of cfg's store in data, with the key
// of the data dir peer: the hosts of a fleet share one key (a checkpoint
// sealed on one verifies on another); their data dirs tell them apart.
func openFleetHost(ctx context.Context, cfg config.Config, data, executorDir, peer string) (*host.Host, error) {
	key, err := os.ReadFile(filepath.Join(peer, datadir.KeyFile))
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(data, datadir.KeyFile), key, 0o600); err != nil {
		return nil, err
	}
	return host.Open(ctx, host.Options{DataDir: data, Config: cfg, ExecutorDir: executorDir})
}

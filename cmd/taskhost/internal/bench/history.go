package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/store"
	"github.com/taskhost/taskhost/store/storetest"
)

// historyTasks is the finished tasks of the history row's store: enough
// that a statement reading the store's history instead of what is live
// shows in the rate (one that read 10,000 tasks at every run's end cost
// 32 ms a task).
const historyTasks = 20000

// historyRow measures one-step tasks/s, as the short-task rows do with
// prestart on, on a host whose store already holds historyTasks finished
// tasks of the same principal and on one with an empty store, in
// interleaved rounds, and returns the row and the median of the rounds'
// ratios (history over empty).
func historyRow(ctx context.Context, base config.Config, dir, executorDir string, perClient int) (Figure, float64, error) {
	open := func(name string, history int) (*host.Host, error) {
		data := filepath.Join(dir, name)
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		if history > 0 {
			lim := store.Budgets{Steps: store.Budget{Limit: 20}, WallMillis: store.Budget{Limit: 1800_000}}
			f := storetest.Fill{Principal: shortPrincipal, Tasks: history, Limits: lim}
			if err := storetest.FillSQLite(ctx, filepath.Join(data, datadir.StoreFile), f); err != nil {
				return nil, err
			}
		}
		cfg := base
		cfg.Tasks.Prestart = shortPrestart
		cfg.MachineSpirit.Enabled = false
		cfg.Tasks.MaxConcurrent = max(cfg.Tasks.MaxConcurrent, shortClients)
		return host.Open(ctx, host.Options{DataDir: data, Config: cfg, ExecutorDir: executorDir})
	}
	empty, err := open("history-empty", 0)
	if err != nil {
		return Figure{}, 0, err
	}
	defer empty.Close(context.WithoutCancel(ctx))
	full, err := open("history-full", historyTasks)
	if err != nil {
		return Figure{}, 0, err
	}
	defer full.Close(context.WithoutCancel(ctx))
	var ratios, rates []float64
	var lat []time.Duration
	for range shortRounds {
		r0, _, err := shortTasks(ctx, empty, shortClients, perClient)
		if err != nil {
			return Figure{}, 0, err
		}
		r1, l1, err := shortTasks(ctx, full, shortClients, perClient)
		if err != nil {
			return Figure{}, 0, err
		}
		rates, lat = append(rates, r1), append(lat, l1...)
		if r0 > 0 {
			ratios = append(ratios, r1/r0)
		}
	}
	r := median(ratios)
	return figure(fmt.Sprintf("one-step task create → completed, %d clients, prestart %d, %d finished tasks in the store", shortClients, shortPrestart, historyTasks), lat,
		fmt.Sprintf("%.0f tasks/s = %.2f× an empty store's in the same rounds (a store's history must not slow its tasks)", median(rates), r)), r, nil
}

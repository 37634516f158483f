package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/store"
)

// Short tasks: one-step tasks created and waited for to completion by
// shortClients clients at once, on a host that starts every task's plugin
// at its start (prestart 0) and on one that keeps shortPrestart started
// ahead (pool.go of host/plugin), in interleaved rounds.
const (
	shortClients  = 8
	shortPrestart = 8
	shortRounds   = 3
	// shortPrincipal creates the short tasks.
	shortPrincipal = "bench-short"
)

// shortTaskRows measures one-step tasks/s, create → completed, with
// shortClients clients, prestart off and on, and returns a row for each
// and the medians over rounds of the rate with prestart on and of on/off.
func shortTaskRows(ctx context.Context, base config.Config, dir, executorDir string, perClient int) (figs []Figure, rate, ratio float64, err error) {
	open := func(name string, prestart int) (*host.Host, error) {
		cfg := base
		cfg.Tasks.Prestart = prestart
		// Its pool would start Prolog workers the rows do not use.
		cfg.MachineSpirit.Enabled = false
		cfg.Tasks.MaxConcurrent = max(cfg.Tasks.MaxConcurrent, shortClients)
		return host.Open(ctx, host.Options{DataDir: filepath.Join(dir, name), Config: cfg, ExecutorDir: executorDir})
	}
	off, err := open("short-off", 0)
	if err != nil {
		return nil, 0, 0, err
	}
	defer off.Close(context.WithoutCancel(ctx))
	on, err := open("short-on", shortPrestart)
	if err != nil {
		return nil, 0, 0, err
	}
	defer on.Close(context.WithoutCancel(ctx))
	var offRates, onRates, ratios []float64
	var offLat, onLat, offOne, onOne []time.Duration
	for range shortRounds {
		// One client alone first, each task once the host is quiet: its
		// create → completed is the critical path, with nothing else to
		// overlap a plugin start with.
		_, l0, err := shortTasks(ctx, off, 1, perClient)
		if err != nil {
			return nil, 0, 0, err
		}
		_, l1, err := shortTasks(ctx, on, 1, perClient)
		if err != nil {
			return nil, 0, 0, err
		}
		offOne, onOne = append(offOne, l0...), append(onOne, l1...)
		r0, l0, err := shortTasks(ctx, off, shortClients, perClient)
		if err != nil {
			return nil, 0, 0, err
		}
		r1, l1, err := shortTasks(ctx, on, shortClients, perClient)
		if err != nil {
			return nil, 0, 0, err
		}
		offRates, onRates = append(offRates, r0), append(onRates, r1)
		offLat, onLat = append(offLat, l0...), append(onLat, l1...)
		if r0 > 0 {
			ratios = append(ratios, r1/r0)
		}
	}
	ratio, rate = median(ratios), median(onRates)
	fo := figure(fmt.Sprintf("one-step task create → completed, %d clients, prestart off", shortClients), offLat, fmt.Sprintf("%.0f tasks/s", median(offRates)))
	fn := figure(fmt.Sprintf("one-step task create → completed, %d clients, prestart %d", shortClients, shortPrestart), onLat,
		fmt.Sprintf("%.0f tasks/s = %.2f× prestart off in the same rounds (target ≥ 100 tasks/s and ≥ 4×)", rate, ratio))
	oo := figure("one-step task create → completed, 1 client, prestart off", offOne, "")
	on1 := figure(fmt.Sprintf("one-step task create → completed, 1 client, prestart %d", shortPrestart), onOne, "")
	if on1.Median > 0 {
		on1.Note = fmt.Sprintf("off − on = %v at the median: the plugin start taken off the critical path", (oo.Median - on1.Median).Round(100*time.Microsecond))
	}
	return []Figure{oo, on1, fo, fn}, rate, ratio, nil
}

// shortTasks runs clients clients, each creating perClient one-step tasks
// one after another and waiting for each to complete; it returns the tasks
// completed per second in all and each task's create → completed.
func shortTasks(ctx context.Context, h *host.Host, clients, perClient int) (float64, []time.Duration, error) {
	const who = shortPrincipal
	lat := make([][]time.Duration, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for range perClient {
				if clients == 1 {
					// A task that arrives on a quiet host: its pool has
					// refilled since the last one (the refill's CPU is
					// then not on this task's path either).
					poolFull(h, "testexec")
				}
				t0 := time.Now()
				t, err := h.Runner.Create(ctx, who, host.CreateRequest{Executor: "testexec", Spec: []byte(`{"goal":"one step","testexec":{"steps":1}}`)})
				if err == nil {
					err = waitCompleted(ctx, h, who, t)
				}
				if err != nil {
					errs[c] = err
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return float64(len(all)) / elapsed.Seconds(), all, nil
}

// waitCompleted waits, as a client watching the task would, for its
// task.completed event; any other end is an error.
func waitCompleted(ctx context.Context, h *host.Host, who string, t store.Task) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var after int64
	for {
		evs, err := h.Runner.Events(ctx, who, t.ID, after)
		if err != nil {
			return fmt.Errorf("bench task %s: %w", t.ID, err)
		}
		for _, ev := range evs {
			after = ev.Seq
			switch ev.Type {
			case host.EventTaskCompleted:
				return nil
			case host.EventTaskFailed, host.EventTaskInterrupted, host.EventTaskCancelled:
				got, _ := h.Runner.Get(ctx, who, t.ID)
				return fmt.Errorf("bench task %s ended %s (%s: %s)", t.ID, got.Status, got.Reason, got.Message)
			}
		}
	}
}

// poolFull waits, at most 10 s, until kind's pool holds every process it
// keeps (at once when it keeps none).
func poolFull(h *host.Host, kind string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if s := h.Registry.PoolStatus(kind); s.Idle >= s.Size {
			return
		}
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskhost/taskhost/host"
)

// concurrency is how many tasks step at once in the concurrent rows; the
// bench host's max_concurrent is the largest. concurrencyRounds rounds
// measure each in turn, so that a change of the machine's load falls on
// all of them alike.
var concurrency = []int{1, 4, 16}

const concurrencyRounds = 3

// overlapTries is how many times a round is run before its tasks' never
// stepping all at once is an error.
const overlapTries = 3

// errNoOverlap is a round in which the tasks never all stepped at once.
var errNoOverlap = errors.New("bench tasks never stepped all at once (raise --steps)")

// setup is one way of stepping tasks at once: tasks of them, created in
// turn on each of hosts.
type setup struct {
	hosts []*host.Host
	tasks int
}

// measured is what interleaved found of one setup: its step intervals
// over all rounds, the median of its steps per second over rounds, the
// median over rounds of its steps/s over the first setup's in the same
// round, and the median of its machine CPU per step (0: unknown).
type measured struct {
	intervals   []time.Duration
	rate, ratio float64
	cpuPerStep  time.Duration
}

// interleaved measures each of setups in turn, concurrencyRounds times,
// n steps a task, in reverse order every other round so that neither
// always follows the other.
func interleaved(ctx context.Context, who, gates string, n int, setups []setup) ([]measured, error) {
	out := make([]measured, len(setups))
	rates := make([][]float64, len(setups))
	ratios := make([][]float64, len(setups))
	cpus := make([][]float64, len(setups))
	for round := range concurrencyRounds {
		perSec := make([]float64, len(setups))
		for j := range setups {
			i := j
			if round%2 == 1 {
				i = len(setups) - 1 - j
			}
			r, err := concurrentSteps(ctx, setups[i].hosts, who, gates, setups[i].tasks, n)
			// On a loaded machine one task can run all its steps before
			// another's second one starts: that round measured nothing
			// and is run again, a bounded number of times.
			for try := 1; errors.Is(err, errNoOverlap) && try < overlapTries; try++ {
				r, err = concurrentSteps(ctx, setups[i].hosts, who, gates, setups[i].tasks, n)
			}
			if err != nil {
				return nil, err
			}
			out[i].intervals = append(out[i].intervals, r.intervals...)
			perSec[i] = r.rate
			rates[i] = append(rates[i], r.rate)
			if r.cpuPerStep > 0 {
				cpus[i] = append(cpus[i], float64(r.cpuPerStep))
			}
		}
		for i := range setups {
			if perSec[0] > 0 {
				ratios[i] = append(ratios[i], perSec[i]/perSec[0])
			}
		}
	}
	for i := range out {
		out[i].rate, out[i].ratio = median(rates[i]), median(ratios[i])
		if len(cpus[i]) > 0 {
			out[i].cpuPerStep = time.Duration(median(cpus[i]))
		}
	}
	return out, nil
}

// concurrentRows measures durable steps of 1, 4 and 16 tasks stepping at
// once on h, concurrencyRounds times each in turn, and returns a row per
// count and, by count, the median over rounds of its steps/s over one
// task's in the same round. target4 is what 4 tasks are held to.
func concurrentRows(ctx context.Context, h *host.Host, who, gates string, n int, target4 float64) ([]Figure, map[int]float64, error) {
	setups := make([]setup, len(concurrency))
	for i, k := range concurrency {
		setups[i] = setup{hosts: []*host.Host{h}, tasks: k}
	}
	ms, err := interleaved(ctx, who, gates, n, setups)
	if err != nil {
		return nil, nil, err
	}
	var out []Figure
	med := map[int]float64{}
	for i, k := range concurrency {
		f := figure(fmt.Sprintf("durable step, %d tasks at once", k), ms[i].intervals, fmt.Sprintf("%.0f steps/s in all%s", ms[i].rate, cpuBound(ms[i].cpuPerStep)))
		if k > 1 {
			med[k] = ms[i].ratio
			target := target4
			if k >= 16 {
				target = 4
			}
			f.Note += fmt.Sprintf(" = %.2f× one task's in the same rounds (target ≥ %.3g×)", med[k], target)
		}
		out = append(out, f)
	}
	return out, med, nil
}

// Command river-bench times a durable step of River's resumable jobs next
// to taskhost's PostgreSQL step, in one run, on one PostgreSQL cluster, in
// interleaved rounds (each round times every row in turn, so that a change
// of the machine's load falls on all of them alike):
//
//   - river: one river.ResumableStep whose callback begins a transaction,
//     records the step with river.ResumableSetStepTx (riverpgxv5) and
//     commits — River's durable, transactional checkpoint of a step;
//   - raw pgx: the rows a taskhost step writes (the task's update, the
//     attempt's close and the next one's insert, two events) in one pgx
//     batch and one commit, with no store in between: the floor;
//   - taskhost store: one FinishAndClaim on PostgreSQL, the store half of
//     a taskhost step, as bench/dbos times it on SQLite.
//
// It prints medians, 95th percentiles and each row's median over River's.
// It is a separate module so that River never becomes a dependency of
// taskhost; see README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"
)

func main() {
	steps := flag.Int("steps", 100, "durable steps timed per row and round (10..100000)")
	rounds := flag.Int("rounds", 5, "interleaved rounds (1..1000)")
	dsn := flag.String("dsn", os.Getenv("TASKHOST_TEST_POSTGRES"), "DSN of a PostgreSQL database for benchmarks (default $TASKHOST_TEST_POSTGRES); River's tables and taskhost's are created there and stay")
	flag.Parse()
	if *steps < 10 || *steps > 100000 {
		fmt.Fprintf(os.Stderr, "river-bench: -steps %d: must be 10..100000\n", *steps)
		os.Exit(2)
	}
	if *rounds < 1 || *rounds > 1000 {
		fmt.Fprintf(os.Stderr, "river-bench: -rounds %d: must be 1..1000\n", *rounds)
		os.Exit(2)
	}
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "river-bench: -dsn is empty and TASKHOST_TEST_POSTGRES is unset: name a PostgreSQL database for benchmarks")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Stdout, *dsn, *steps, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "river-bench:", err)
		os.Exit(1)
	}
}

// stepper times n durable steps of one kind.
type stepper interface {
	steps(ctx context.Context, n int) ([]time.Duration, error)
	close()
}

// row is one measured kind of step: its name, what it is held to (a
// multiple of River's median, 0 for none) and its samples over all rounds.
type row struct {
	what    string
	target  float64
	open    func(ctx context.Context, dsn string) (stepper, error)
	samples []time.Duration
	wal     int64 // bytes of WAL written while the row's steps ran
}

func run(ctx context.Context, out io.Writer, dsn string, steps, rounds int) error {
	settings, err := serverSettings(ctx, dsn)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "river-bench: %s\n", settings)
	rows := []*row{
		{what: "river: ResumableStep + ResumableSetStepTx, one tx", open: openRiver},
		{what: "raw pgx: a taskhost step's rows, one batch, one commit", open: openRaw},
		{what: "taskhost store: FinishAndClaim", target: 1.2, open: openStore},
	}
	steppers := make([]stepper, len(rows))
	for i, r := range rows {
		if steppers[i], err = r.open(ctx, dsn); err != nil {
			return fmt.Errorf("%s: %w", r.what, err)
		}
		defer steppers[i].close()
	}
	wal, err := openWAL(ctx, dsn)
	if err != nil {
		return err
	}
	defer wal.close()
	for round := range rounds {
		fmt.Fprintf(os.Stderr, "river-bench: round %d of %d\n", round+1, rounds)
		for i, r := range rows {
			before, err := wal.position(ctx)
			if err != nil {
				return err
			}
			d, err := steppers[i].steps(ctx, steps)
			if err != nil {
				return fmt.Errorf("%s: %w", r.what, err)
			}
			after, err := wal.position(ctx)
			if err != nil {
				return err
			}
			r.samples, r.wal = append(r.samples, d...), r.wal+after-before
		}
	}
	return report(out, settings, rows)
}

func report(out io.Writer, settings string, rows []*row) error {
	fmt.Fprintf(out, "PostgreSQL: %s\n\n", settings)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tN\tMEDIAN\tP95\t× RIVER\tTARGET\tWAL/STEP")
	base := median(rows[0].samples)
	var raw, st time.Duration
	for i, r := range rows {
		m := median(r.samples)
		ratio, target := "-", "-"
		if i > 0 && base > 0 {
			ratio = fmt.Sprintf("%.2f", float64(m)/float64(base))
		}
		if r.target > 0 {
			target = fmt.Sprintf("≤ %.1f", r.target)
		}
		switch i {
		case 1:
			raw = m
		case 2:
			st = m
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d B\n", r.what, len(r.samples), m.Round(time.Microsecond), p95(r.samples).Round(time.Microsecond), ratio, target,
			r.wal/int64(max(1, len(r.samples))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if raw > 0 {
		_, err := fmt.Fprintf(out, "\ntaskhost store step / raw pgx commit = %.2f (target ≤ 2)\n", float64(st)/float64(raw))
		return err
	}
	return nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func p95(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*95/100)]
}

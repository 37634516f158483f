package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkSettleTreesHistory measures SettleTrees, which the runner calls
// at every run's end, over a store of 100 finished tasks and over one of
// 10,000, each with the same live part: 20 interrupted tasks and one tree
// of a running parent and two running children. It reports the median
// call on each and their ratio, which a settle bounded by what is live
// keeps near 1.
func BenchmarkSettleTreesHistory(b *testing.B) {
	ctx := context.Background()
	medians := map[int]time.Duration{}
	for _, history := range []int{100, 10000} {
		s := openTest(b)
		for i := range history {
			createTask(b, s, "p", fmt.Sprintf("h%05d", i))
		}
		if _, err := s.w.ExecContext(ctx, `UPDATE tasks SET status = 'completed' WHERE id LIKE 'h%'`); err != nil {
			b.Fatal(err)
		}
		for i := range 20 {
			runningTask(b, s, "p", fmt.Sprintf("i%02d", i))
			if _, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: fmt.Sprintf("i%02d", i), From: []Status{StatusRunning},
				To: StatusInterrupted, Reason: ReasonHostRestart}); err != nil {
				b.Fatal(err)
			}
		}
		parent := runningTask(b, s, "p", "parent")
		for _, id := range []string{"c1", "c2"} {
			if _, err := delegate(b, s, parent, id, 1); err != nil {
				b.Fatal(err)
			}
		}
		medians[history] = medianSettle(b, s)
		s.Close()
	}
	b.ReportMetric(float64(medians[100].Microseconds()), "µs(100)")
	b.ReportMetric(float64(medians[10000].Microseconds()), "µs(10000)")
	b.ReportMetric(float64(medians[10000])/float64(medians[100]), "10000/100")
}

// BenchmarkSettleTreesLive measures SettleTrees over 1 and over 30 quiet
// trees (a running parent with a queued child: no rule applies),
// and reports the median call on each and their ratio. Each quiet tree
// costs a settle what reading it costs, however many trees are quiet.
func BenchmarkSettleTreesLive(b *testing.B) {
	medians := map[int]time.Duration{}
	for _, trees := range []int{1, 30} {
		s := openTest(b)
		for i := range trees {
			parent := runningTask(b, s, "p", fmt.Sprintf("parent%02d", i))
			if _, err := delegate(b, s, parent, fmt.Sprintf("child%02d", i), 1); err != nil {
				b.Fatal(err)
			}
		}
		medians[trees] = medianSettle(b, s)
		s.Close()
	}
	b.ReportMetric(float64(medians[1].Microseconds()), "µs(1)")
	b.ReportMetric(float64(medians[30].Microseconds()), "µs(30)")
	b.ReportMetric(float64(medians[30])/float64(medians[1]), "30/1")
}

// medianSettle is the median of 50 SettleTrees calls on s.
func medianSettle(b *testing.B, s *Store) time.Duration {
	b.Helper()
	const calls = 50
	times := make([]time.Duration, calls)
	for i := range calls {
		start := time.Now()
		if _, err := s.SettleTrees(context.Background(), func(Task) []NewEvent { return nil }); err != nil {
			b.Fatal(err)
		}
		times[i] = time.Since(start)
	}
	slices.Sort(times)
	return times[calls/2]
}

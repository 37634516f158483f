package integration

import (
	"encoding/json"
	"testing"
	"time"
)

// taskhost bench runs end to end and reports every figure it promises.
func TestBenchCommand(t *testing.T) {
	t.Parallel()
	out, errOut, code := taskhostFor(t, 5*time.Minute, "bench", "--steps", "20", "--reps", "2", "--recovery-sizes", "200", "--json")
	if code != 0 {
		t.Fatalf("bench exit %d: %s", code, errOut)
	}
	var r struct {
		Figures []struct {
			Name   string `json:"name"`
			N      int    `json:"n"`
			Median int64  `json:"median_ns"`
		} `json:"figures"`
		StepRatio            float64 `json:"step_ratio"`
		StepRatioNormal      float64 `json:"step_ratio_normal"`
		ConcurrentThroughput float64 `json:"concurrent_throughput"`
		HistoryRatio         float64 `json:"history_ratio"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	if len(r.Figures) < 7 || r.StepRatio <= 0 || r.StepRatioNormal <= 0 || r.ConcurrentThroughput <= 0 || r.HistoryRatio <= 0 {
		t.Fatalf("report %+v", r)
	}
	grandchild, normal, concurrent := false, 0, false
	msStarts, msSkipped := 0, false
	for _, f := range r.Figures {
		switch f.Name {
		case "machinespirit plugin start, cold (saved state built)", "machinespirit plugin start, warm (saved state cached)":
			if f.N == 2 {
				msStarts++
			}
		case "machinespirit plugin start":
			msSkipped = true // no swipl here: the row says why
		}
		if f.N > 0 && f.Median <= 0 {
			t.Errorf("figure %q has %d samples and no median", f.Name, f.N)
		}
		if (f.Name == "floor at synchronous=NORMAL" || f.Name == "durable step at synchronous=NORMAL") && f.N == 20 {
			normal++
		}
		concurrent = concurrent || (f.Name == "durable step, 4 tasks at once" && f.N >= 4*20)
		grandchild = grandchild || (f.Name == "plugin SIGKILL → interrupted persisted, grandchild holding stderr" && f.N == 2)
	}
	if msStarts != 2 && !msSkipped {
		t.Errorf("no cold and warm machinespirit start rows with 2 samples each: %+v", r.Figures)
	}
	if normal != 2 {
		t.Errorf("no floor and durable step rows at synchronous=NORMAL with 20 samples each: %+v", r.Figures)
	}
	if !concurrent {
		t.Errorf("no row of 4 tasks stepping at once with 80 samples: %+v", r.Figures)
	}
	if !grandchild {
		t.Errorf("no crash row with a grandchild holding the plugin's stderr: %+v", r.Figures)
	}
	for _, args := range [][]string{{"bench", "--steps", "1"}, {"bench", "--recovery-sizes", "x"}} {
		if _, _, code := taskhost(t, args...); code != 2 {
			t.Errorf("taskhost %v: exit %d, want 2", args, code)
		}
	}
}

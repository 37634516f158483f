package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/plugins/machinespirit"
)

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, err := parseFlags([]string{
		"--swipl", "/usr/bin/swipl", "--swipl-version", "9.0.4",
		"--graphs-dir", "/etc/taskhost/graphs", "--graph-pin", "a=" + strings.Repeat("0", 64),
		"--graph-pin", "b=" + strings.Repeat("1", 64), "--checkpoint-max-bytes", "1000", "--start", "source",
		"--worker-memory-mb", "512", "--worker-cpu-seconds", "60", "--trampoline", "/opt/taskhost/taskhost-confine",
		"--rlm-goal-mode", "--max-parallel-model-calls", "3",
		"--handler-module", "/etc/taskhost/a=b.pl=" + strings.Repeat("2", 64),
	}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SwiplPath != "/usr/bin/swipl" || cfg.SwiplVersion != "9.0.4" || cfg.GraphsDir != "/etc/taskhost/graphs" ||
		len(cfg.GraphPins) != 2 || cfg.CheckpointMaxBytes != 1000 || cfg.StartMode != machinespirit.StartFromSource ||
		cfg.WorkerMemoryBytes != 512<<20 || cfg.WorkerCPUSeconds != 60 || cfg.Trampoline != "/opt/taskhost/taskhost-confine" ||
		!cfg.RLMGoalMode || cfg.MaxParallelModelCalls != 3 ||
		len(cfg.HandlerModules) != 1 || cfg.HandlerModules[0].Path != "/etc/taskhost/a=b.pl" || cfg.HandlerModules[0].SHA256 != strings.Repeat("2", 64) {
		t.Fatalf("config %+v", cfg)
	}
	if cfg, err := parseFlags([]string{"--swipl", "/usr/bin/swipl"}, &stderr); err != nil || cfg.RLMGoalMode || cfg.MaxParallelModelCalls != machinespirit.DefaultMaxParallelModelCalls {
		t.Fatalf("defaults %+v, %v: the goal mode is off unless asked for", cfg, err)
	}
	for _, bad := range [][]string{
		{"--graph-pin", "nohash"},
		{"--graph-pin", "a=x", "--graph-pin", "a=y"},
		{"--bogus"},
		{"extra-argument"},
		{"--worker-memory-mb", "65537"},
		{"--worker-memory-mb", "-1"},
		{"--worker-cpu-seconds", "x"},
		{"--trampoline", "taskhost-confine"},
		{"--max-parallel-model-calls", "x"},
		{"--handler-module", "/etc/m.pl"},
		{"--handler-module", "/etc/m.pl="},
		{"--handler-module", "=" + strings.Repeat("2", 64)},
	} {
		if _, err := parseFlags(bad, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// TestRunRejectsBadFlags: bad flags end the plugin before the handshake,
// with status 2 and nothing on stdout.
func TestRunRejectsBadFlags(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"--bogus"}, &stderr); code != 2 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stderr.String(), "bogus") {
		t.Fatalf("stderr %q", stderr.String())
	}
}

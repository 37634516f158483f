package bench

import (
	"strings"
	"testing"
	"time"
)

func TestBusyTicks(t *testing.T) {
	for _, c := range []struct {
		line string
		want time.Duration
		err  string
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 2 30 9999 888 4 5 6 7 0\n", 147 * 10 * time.Millisecond, ""},
		{"cpu  0 0 0 1 0 0 0 0 0 0", 0, ""},
		{"cpu0 100 2 30 9999 888 4 5 6 7 0", 0, "no cpu line"},
		{"cpu  100 2 30", 0, "no cpu line"},
		{"cpu  100 x 30 9999 888 4 5 6 7 0", 0, `counter 2: "x"`},
		{"cpu  100 -2 30 9999 888 4 5 6 7 0", 0, `counter 2: "-2"`},
	} {
		got, err := busyTicks(c.line)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("busyTicks(%q) = %v, %v; want an error with %q", c.line, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("busyTicks(%q) = %v, %v; want %v", c.line, got, err, c.want)
		}
	}
}

func TestMachineCPUNeverGoesBack(t *testing.T) {
	a, err := machineCPU()
	if err != nil {
		t.Skipf("no /proc/stat here: %v", err)
	}
	b, err := machineCPU()
	if err != nil || b < a || a <= 0 {
		t.Fatalf("machineCPU: %v then %v, %v; want a positive count that never falls", a, b, err)
	}
}

func TestCPUBound(t *testing.T) {
	if got := cpuBound(0); got != "" {
		t.Errorf("cpuBound(0) = %q, want nothing", got)
	}
	if got := cpuBound(500 * time.Microsecond); !strings.Contains(got, "500µs a step") || !strings.Contains(got, "steps/s") {
		t.Errorf("cpuBound(500µs) = %q", got)
	}
}

func TestStepCPUSaysBothOrNothing(t *testing.T) {
	for _, c := range []struct {
		cpu  stepCPU
		want string
	}{
		{stepCPU{daemon: 612 * time.Microsecond, plugin: 231 * time.Microsecond}, "CPU a step: daemon 612µs, plugin 231µs"},
		{stepCPU{daemon: 612 * time.Microsecond}, ""},
		{stepCPU{plugin: 231 * time.Microsecond}, ""},
		{stepCPU{}, ""},
	} {
		if got := c.cpu.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.cpu, got, c.want)
		}
	}
}

func TestCPUUseCountsThisProcess(t *testing.T) {
	self0, children0 := cpuUse()
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
	}
	self1, children1 := cpuUse()
	if self1 <= self0 || children1 < children0 || self0 <= 0 {
		t.Fatalf("cpuUse: self %v then %v, children %v then %v; want this process's CPU to grow", self0, self1, children0, children1)
	}
}

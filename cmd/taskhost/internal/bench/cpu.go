package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of /proc/stat's counters: USER_HZ, 100 on every
// Linux architecture Go supports.
const userHZ = 100

// machineCPU is the CPU time the whole machine has spent busy since boot
// (every process, the kernel's own work included, idle and iowait not),
// from /proc/stat. Durable steps at once are bounded by it, not only by
// the store: a step's CPU is the host's, its plugin's, the kernel's and,
// on PostgreSQL, the server's, all on the same cores.
func machineCPU() (time.Duration, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("/proc/stat: %w", err)
	}
	return busyTicks(line)
}

// busyTicks is the busy time of /proc/stat's "cpu" line: user, nice,
// system, irq, softirq and steal (guest time is already in user).
func busyTicks(line string) (time.Duration, error) {
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, errors.New("/proc/stat: no cpu line of 8 counters")
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("/proc/stat: cpu counter %d: %q", i, fields[i])
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / userHZ, nil
}

// cpuBound says what the machine's CPU per step allows: the steps/s that
// its cores, all busy with nothing else, would hold.
func cpuBound(perStep time.Duration) string {
	if perStep <= 0 {
		return ""
	}
	cores := runtime.NumCPU()
	return fmt.Sprintf("; machine CPU %s a step, so %d cores hold at most %.0f steps/s",
		perStep.Round(time.Microsecond), cores, float64(cores)*float64(time.Second)/float64(perStep))
}

// stepCPU is the CPU one task's steps cost, per step: the daemon's (this
// process: the host runs in it) and its plugin's (a reaped child). Both
// include the task's own start and stop, spread over its steps.
type stepCPU struct{ daemon, plugin time.Duration }

func (c stepCPU) String() string {
	if c.daemon <= 0 || c.plugin <= 0 {
		return ""
	}
	return fmt.Sprintf("CPU a step: daemon %s, plugin %s", c.daemon.Round(time.Microsecond), c.plugin.Round(time.Microsecond))
}

// cpuUse is this process's CPU so far and its reaped children's.
func cpuUse() (self, children time.Duration) {
	var s, c syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &s) != nil || syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c) != nil {
		return 0, 0
	}
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime)
}

package confine_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/internal/confine"
)

// probeEnv makes the test binary, exec'd by the trampoline, run one probe
// instead of the tests (the go-plugin TestHelperProcess pattern).
const probeEnv = "CONFINE_TEST_PROBE"

// init keeps a probe's main goroutine on the main thread, the one the
// trampoline exec'd from: the parent-death signal it reads is per thread,
// and a thread the runtime starts later carries none (under load the probe
// read 0 on one and the test failed).
func init() {
	if os.Getenv(probeEnv) == "1" {
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	confine.Main()
	if os.Getenv(probeEnv) == "1" {
		os.Exit(runProbe(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runProbe does what args say and prints one line per step: "ok ..." or
// "err <errno name>".
func runProbe(args []string) int {
	report := func(err error, okText string) {
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				fmt.Println("err", unix.ErrnoName(errno))
				return
			}
			fmt.Println("err", err)
			return
		}
		fmt.Println("ok", okText)
	}
	for len(args) > 0 {
		op := args[0]
		args = args[1:]
		switch op {
		case "read":
			b, err := os.ReadFile(args[0])
			args = args[1:]
			report(err, strings.TrimSpace(string(b)))
		case "write":
			err := os.WriteFile(args[0], []byte("written"), 0o600)
			args = args[1:]
			report(err, "")
		case "cat": // whole file, for /proc/self/*
			b, err := os.ReadFile(args[0])
			args = args[1:]
			if err != nil {
				report(err, "")
				continue
			}
			os.Stdout.Write(b)
		case "exec":
			err := syscall.Exec("/bin/true", []string{"true"}, nil)
			report(err, "")
		case "execveat":
			// A guess of the trampoline's secret: 0.
			fd, err := unix.Open("/bin/true", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				report(err, "")
				continue
			}
			empty := []byte{0}
			argv := []*byte{&[]byte("true\x00")[0], nil}
			envv := []*byte{nil}
			_, _, e := unix.RawSyscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])),
				uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), unix.AT_EMPTY_PATH, 0)
			report(e, "")
		case "fork":
			cmd := exec.Command("/bin/true")
			err := cmd.Start()
			if err == nil {
				err = cmd.Wait()
			}
			report(err, "")
		case "socket-inet":
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
			if err == nil {
				unix.Close(fd)
			}
			report(err, "")
		case "connect": // to the unix socket at the next argument
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				err = unix.Connect(fd, &unix.SockaddrUnix{Name: args[0]})
				unix.Close(fd)
			}
			args = args[1:]
			report(err, "")
		case "socket-unix-dgram":
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
			if err == nil {
				unix.Close(fd)
			}
			report(err, "")
		case "listen": // a stream socket of its own, listening in the cwd
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				if err = unix.Bind(fd, &unix.SockaddrUnix{Name: "own.sock"}); err == nil {
					err = unix.Listen(fd, 1)
				}
				unix.Close(fd)
			}
			report(err, "")
		case "socket-unix":
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err == nil {
				unix.Close(fd)
			}
			report(err, "")
		case "vmread": // read our own memory through process_vm_readv
			src := []byte("x")
			dst := make([]byte, 1)
			_, err := unix.ProcessVMReadv(os.Getpid(),
				[]unix.Iovec{{Base: &dst[0], Len: 1}}, []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 1}}, 0)
			report(err, "")
		case "io_uring":
			var params [120]byte // struct io_uring_params
			fd, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
			if e == 0 {
				unix.Close(int(fd))
				report(nil, "")
			} else {
				report(e, "")
			}
		case "traceme":
			_, _, e := unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
			if e == 0 {
				report(nil, "")
			} else {
				report(e, "")
			}
		case "id":
			groups, _ := unix.Getgroups()
			fmt.Printf("ok uid=%d gid=%d groups=%v\n", os.Getuid(), os.Getgid(), groups)
		case "pdeathsig":
			var sig int
			err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0)
			report(err, strconv.Itoa(sig))
		case "wait": // until stdin closes, so the parent can look at us
			io.Copy(io.Discard, os.Stdin)
			fmt.Println("ok")
		case "whoami":
			fmt.Println("ok probe-binary")
		case "cwd":
			wd, err := os.Getwd()
			report(err, wd)
		default:
			fmt.Println("unknown probe", op)
			return 2
		}
	}
	return 0
}

func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func requireLandlock(t *testing.T) confine.Support {
	t.Helper()
	s := confine.Probe()
	if s.LandlockABI < 1 {
		t.Skip("the kernel offers no Landlock")
	}
	return s
}

func requireSeccomp(t *testing.T) {
	t.Helper()
	if !confine.Probe().Seccomp {
		t.Skip("the kernel offers no seccomp filters")
	}
}

// run starts the test binary confined by p with the probe steps and returns
// its output lines; it fails the test unless the child exits 0.
func run(t *testing.T, p confine.Policy, execFD *os.File, steps ...string) []string {
	t.Helper()
	out, err := start(t, p, execFD, testBinary(t), steps...)
	if err != nil {
		t.Fatalf("confined probe %v: %v\n%s", steps, err, out)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

func start(t *testing.T, p confine.Policy, execFD *os.File, target string, steps ...string) ([]byte, error) {
	t.Helper()
	cmd, err := confine.Command(testBinary(t), p, execFD, target, steps...)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	cmd.Env = []string{probeEnv + "=1"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.Bytes(), err
}

// systemPaths are what a Go test binary needs to start under Landlock.
func systemPaths() []string {
	var ps []string
	for _, p := range []string{"/usr", "/lib", "/lib64", "/etc/ld.so.cache"} {
		if _, err := os.Stat(p); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

func TestLandlockConfinesTheFilesystem(t *testing.T) {
	requireLandlock(t)
	outside, ro, rw, cwd := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "host.key")
	readable := filepath.Join(ro, "ro.txt")
	for _, f := range []string{secret, readable} {
		if err := os.WriteFile(f, []byte("content"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := confine.Policy{
		Dir: cwd, Landlock: confine.LandlockRequired, DropCaps: true,
		ReadOnly: append(systemPaths(), ro), ReadWrite: []string{rw},
	}
	got := run(t, p, nil,
		"read", secret,
		"write", filepath.Join(outside, "planted"),
		"read", readable,
		"write", filepath.Join(ro, "planted"),
		"write", filepath.Join(rw, "mine"),
		"read", filepath.Join(rw, "mine"),
		"write", filepath.Join(cwd, "cwd-not-granted"),
		"cwd",
	)
	want := []string{"err EACCES", "err EACCES", "ok content", "err EACCES", "ok ", "ok written", "err EACCES", "ok " + cwd}
	assertLines(t, got, want)
	for _, f := range []string{filepath.Join(outside, "planted"), filepath.Join(ro, "planted")} {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after a refused write: %v", f, err)
		}
	}
}

func TestNoNewPrivsCapsAndRlimitsInProcStatus(t *testing.T) {
	p := confine.Policy{
		Dir: t.TempDir(), DropCaps: true, Pdeathsig: syscall.SIGKILL,
		Rlimits: confine.Rlimits{AddressSpace: 3 << 30, CPUSeconds: 600, NoFile: 123, NProc: 4567},
	}
	got := strings.Join(run(t, p, nil, "cat", "/proc/self/status", "cat", "/proc/self/limits", "pdeathsig"), "\n")
	for _, want := range []string{
		"NoNewPrivs:\t1",
		"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000",
		// limits: soft and hard both set
		"Max address space         3221225472           3221225472",
		"Max cpu time              600                  601",
		"Max open files            123                  123",
		"Max processes             4567                 4567",
		"ok 9", // SIGKILL
	} {
		if !strings.Contains(got, want) {
			t.Errorf("child's /proc/self lacks %q:\n%s", want, got)
		}
	}
}

func TestWithoutDropCapsRootKeepsItsCapabilities(t *testing.T) {
	// The control for the test above: the probe can see capabilities.
	if os.Geteuid() != 0 {
		t.Skip("needs root to hold capabilities")
	}
	got := strings.Join(run(t, confine.Policy{Dir: t.TempDir()}, nil, "cat", "/proc/self/status"), "\n")
	if strings.Contains(got, "CapEff:\t0000000000000000") || !strings.Contains(got, "NoNewPrivs:\t1") {
		t.Errorf("want root's capabilities kept and no_new_privs set:\n%s", got)
	}
}

func TestSeccompDenyLists(t *testing.T) {
	requireSeccomp(t)
	steps := []string{"exec", "execveat", "fork", "socket-inet", "socket-unix", "vmread", "cat", "/proc/self/status"}
	tests := []struct {
		name string
		sc   confine.Seccomp
		want []string // exec, execveat, fork, inet, unix, vmread
	}{
		{"exec", confine.Seccomp{DenyExec: true}, []string{"err EPERM", "err EPERM", "err EPERM", "ok ", "ok ", "ok "}},
		{"fork", confine.Seccomp{DenyFork: true}, []string{"exec-ok", "", "err EPERM", "ok ", "ok ", "ok "}},
		{"network", confine.Seccomp{DenyNetwork: true}, []string{"exec-ok", "", "ok ", "err EACCES", "ok ", "ok "}},
		{"ptrace", confine.Seccomp{DenyPtrace: true}, []string{"exec-ok", "", "ok ", "ok ", "ok ", "err EPERM"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := confine.Policy{Dir: t.TempDir(), DropCaps: true, Seccomp: tt.sc}
			s := steps
			if tt.want[0] == "exec-ok" {
				s = steps[2:] // an allowed exec would end the probe
			}
			got := run(t, p, nil, s...)
			want := tt.want
			if want[0] == "exec-ok" {
				want = want[2:]
			}
			assertLines(t, got[:len(want)], want)
			if !slices.Contains(got, "Seccomp:\t2") {
				t.Errorf("no seccomp filter mode in /proc/self/status:\n%s", strings.Join(got, "\n"))
			}
		})
	}
}

func TestSeccompDenyExecStillRunsTheTarget(t *testing.T) {
	requireSeccomp(t)
	// The trampoline's own exec passes the filter; nothing after it does.
	p := confine.Policy{Dir: t.TempDir(), DropCaps: true, Seccomp: confine.Seccomp{DenyExec: true, DenyPtrace: true}}
	assertLines(t, run(t, p, nil, "whoami", "traceme", "exec"), []string{"ok probe-binary", "err EPERM", "err EPERM"})
}

func TestControlWithoutSeccompEverythingWorks(t *testing.T) {
	got := run(t, confine.Policy{Dir: t.TempDir()}, nil, "fork", "socket-inet", "vmread", "exec")
	// exec replaced the probe with /bin/true, which prints nothing.
	assertLines(t, got, []string{"ok ", "ok ", "ok "})
}

func TestExecFDRunsTheOpenedFileEvenAfterThePathIsSwapped(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "plugin")
	copyFile(t, testBinary(t), target, 0o755)
	f, err := os.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Swap the path for a program that would say so.
	swapped := filepath.Join(dir, "swapped")
	if err := os.WriteFile(swapped, []byte("#!/bin/sh\necho ok swapped\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(swapped, target); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []confine.Mode{confine.LandlockOff, confine.LandlockBestEffort} {
		p := confine.Policy{Dir: dir, Landlock: mode, ReadOnly: systemPaths(), Seccomp: confine.Seccomp{DenyExec: true}}
		assertLines(t, run(t, p, f, "whoami"), []string{"ok probe-binary"})
	}
	// Control: by path, the swapped program runs.
	out, err := start(t, confine.Policy{Dir: dir}, nil, target, "whoami")
	if err != nil || strings.TrimSpace(string(out)) != "ok swapped" {
		t.Fatalf("by path: %v %q, want the swapped script", err, out)
	}
}

func TestCredentialsChangeAndPdeathsigIsRearmed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change credentials")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(testBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := confine.Policy{Dir: dir, UID: 65534, GID: 65534, DropCaps: true, Pdeathsig: syscall.SIGTERM}
	got := run(t, p, f, "id", "pdeathsig", "cat", "/proc/self/status")
	assertLines(t, got[:2], []string{"ok uid=65534 gid=65534 groups=[65534]", "ok 15"})
	if all := strings.Join(got, "\n"); !strings.Contains(all, "CapEff:\t0000000000000000") {
		t.Errorf("capabilities left after the uid change:\n%s", all)
	}
}

func TestTrampolineFailureExits126WithOneLine(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-plugin")
	out, err := start(t, confine.Policy{Dir: t.TempDir()}, nil, missing, "whoami")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != confine.ExitCode {
		t.Fatalf("err = %v, want exit %d", err, confine.ExitCode)
	}
	if line := strings.TrimSpace(string(out)); line != "confine: open target: no such file or directory" {
		t.Errorf("stderr = %q", line)
	}
}

func TestCommandRefusesBadPolicies(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	many := make([]string, confine.MaxPaths+1)
	for i := range many {
		many[i] = dir
	}
	long := "/" + strings.Repeat("a", confine.MaxPathBytes)
	tests := []struct {
		name  string
		p     confine.Policy
		field string
		err   error
	}{
		{"relative dir", confine.Policy{Dir: "work"}, "Dir", confine.ErrNotAbsolute},
		{"missing dir", confine.Policy{Dir: filepath.Join(dir, "nope")}, "Dir", fs.ErrNotExist},
		{"dir is a file", confine.Policy{Dir: file}, "Dir", confine.ErrNotDir},
		{"relative ro", confine.Policy{Dir: dir, ReadOnly: []string{"usr"}}, "ReadOnly[0]", confine.ErrNotAbsolute},
		{"missing rw", confine.Policy{Dir: dir, ReadWrite: []string{dir, filepath.Join(dir, "gone")}}, "ReadWrite[1]", fs.ErrNotExist},
		{"too many paths", confine.Policy{Dir: dir, ReadOnly: many}, "ReadOnly+ReadWrite", confine.ErrTooMany},
		{"path too long", confine.Policy{Dir: dir, ReadOnly: []string{long}}, "ReadOnly[0]", confine.ErrTooMany},
		{"bad mode", confine.Policy{Dir: dir, Landlock: 7}, "Landlock", confine.ErrBadValue},
		{"uid without gid", confine.Policy{Dir: dir, UID: 1000}, "GID", confine.ErrBadValue},
		{"negative uid", confine.Policy{Dir: dir, UID: -1}, "UID/GID", confine.ErrBadValue},
		{"bad signal", confine.Policy{Dir: dir, Pdeathsig: 99}, "Pdeathsig", confine.ErrBadValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := confine.Command(testBinary(t), tt.p, nil, "/bin/true")
			var pe *confine.PolicyError
			if !errors.As(err, &pe) || pe.Field != tt.field || !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want a PolicyError on %s wrapping %v", err, tt.field, tt.err)
			}
		})
	}
	// At the bound: MaxPaths paths of MaxPathBytes-long names are accepted
	// by validation (the long one does not exist, so only the count).
	if _, err := confine.Command(testBinary(t), confine.Policy{Dir: dir, ReadOnly: many[:confine.MaxPaths]}, nil, "/bin/true"); err != nil {
		t.Errorf("MaxPaths paths: %v", err)
	}
	if _, err := confine.Command("bin/trampoline", confine.Policy{Dir: dir}, nil, "/bin/true"); !errors.Is(err, confine.ErrNotAbsolute) {
		t.Errorf("relative trampoline: %v", err)
	}
	if _, err := confine.Command(testBinary(t), confine.Policy{Dir: dir}, nil, "true"); !errors.Is(err, confine.ErrNotAbsolute) {
		t.Errorf("relative target: %v", err)
	}
}

func TestMainReturnsOutsideTheTrampolineRole(t *testing.T) {
	// TestMain already called it; a second call must be as harmless.
	confine.Main()
}

func TestSupportString(t *testing.T) {
	tests := []struct {
		s    confine.Support
		want string
	}{
		{confine.Support{}, "none (no Landlock)"},
		{confine.Support{LandlockABI: 7, Seccomp: true, CgroupV2: "/sys/fs/cgroup"}, "landlock abi 7, seccomp, cgroup2"},
		{confine.Support{LandlockABI: 1}, "landlock abi 1"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.s, got, tt.want)
		}
	}
	p := confine.Policy{Landlock: confine.LandlockBestEffort, DropCaps: true, Seccomp: confine.Seccomp{DenyPtrace: true}, Rlimits: confine.Rlimits{NoFile: 1}}
	if got, want := p.Summary(confine.Support{LandlockABI: 7, Seccomp: true}), "landlock abi 7, no_new_privs, no capabilities, seccomp, rlimits"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	if got := p.Summary(confine.Support{}); got != "none (no Landlock)" {
		t.Errorf("Summary without Landlock = %q", got)
	}
}

func assertLines(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("got %d lines %q, want %q", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %q, want %q (all: %q)", i, got[i], want[i], got)
		}
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

func TestATrampolineWithoutMainRunsNoTests(t *testing.T) {
	// A Go test binary whose TestMain forgot confine.Main: the guard makes it
	// run no test instead of its whole suite.
	dir := t.TempDir()
	bin := filepath.Join(dir, "nomain.test")
	src := filepath.Join(dir, "x_test.go")
	if err := os.WriteFile(src, []byte("package x\nimport (\"os\"; \"testing\")\nfunc TestRecurse(t *testing.T) { os.WriteFile(os.Getenv(\"MARK\"), nil, 0o600) }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n\ngo 1.26\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build a test binary here: %v\n%s", err, out)
	}
	mark := filepath.Join(dir, "ran")
	cmd, err := confine.Command(bin, confine.Policy{Dir: dir}, nil, "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "MARK="+mark)
	out, _ := cmd.CombinedOutput()
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the test binary ran its tests as a trampoline:\n%s", out)
	}
	if !strings.Contains(string(out), "no tests to run") {
		t.Errorf("output %q, want the testing package's no-tests warning", out)
	}
}

func TestMarkedFindsConfinedProcessesOnly(t *testing.T) {
	requireSeccomp(t)
	self, err := confine.Marked(os.Getpid())
	if err != nil || self {
		t.Fatalf("Marked(self) = %v, %v; want false", self, err)
	}
	tests := []struct {
		name string
		p    confine.Policy
		want bool
	}{
		{"confined", confine.Policy{DropCaps: true, Seccomp: confine.Seccomp{DenyPtrace: true}}, true},
		// The bounding set is not a mark: a new user namespace fills it
		// again (`unshare -U`), while no_new_privs and the filter stay.
		{"capabilities kept", confine.Policy{Seccomp: confine.Seccomp{DenyPtrace: true}}, true},
		{"no seccomp", confine.Policy{DropCaps: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.p.Dir = t.TempDir()
			cmd, err := confine.Command(testBinary(t), tt.p, nil, testBinary(t), "wait")
			if err != nil {
				t.Fatal(err)
			}
			cmd.Env = []string{probeEnv + "=1"}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer stdin.Close()
			// Poll until the trampoline has exec'd the probe (its argv[0]
			// no longer marks the trampoline).
			deadline := time.Now().Add(10 * time.Second)
			for {
				argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
				exec := len(argv) > 0 && !bytes.HasPrefix(argv, []byte("confine-trampoline\x00"))
				if got, err := confine.Marked(cmd.Process.Pid); exec && err == nil && got == tt.want {
					return
				}
				if time.Now().After(deadline) {
					got, err := confine.Marked(cmd.Process.Pid)
					t.Fatalf("Marked(child) = %v, %v; want %v\n%s", got, err, tt.want, out.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	if _, err := confine.Marked(1 << 30); err == nil {
		t.Error("Marked of a pid that does not exist: no error")
	}
}

func TestSeccompRefusesIOUring(t *testing.T) {
	// io_uring's socket and open operations would bypass the filter.
	requireSeccomp(t)
	control := run(t, confine.Policy{Dir: t.TempDir()}, nil, "io_uring")
	if len(control) != 1 || control[0] != "ok " {
		t.Skipf("io_uring is unavailable here even unconfined (%q): nothing to refuse", control)
	}
	p := confine.Policy{Dir: t.TempDir(), Seccomp: confine.Seccomp{DenyNetwork: true}}
	assertLines(t, run(t, p, nil, "io_uring"), []string{"err EPERM"})
}

func TestSeccompDenyConnect(t *testing.T) {
	requireSeccomp(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "daemon.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	steps := []string{"connect", sock, "socket-unix-dgram", "socket-unix", "listen"}
	// Control: unconfined, it reaches the socket.
	assertLines(t, run(t, confine.Policy{Dir: t.TempDir()}, nil, steps...), []string{"ok ", "ok ", "ok ", "ok "})
	p := confine.Policy{Dir: t.TempDir(), Seccomp: confine.Seccomp{DenyConnect: true}}
	assertLines(t, run(t, p, nil, steps...), []string{"err EPERM", "err EPERM", "ok ", "ok "})
}

// A limit meant for a small target (a Prolog worker) is below what the Go
// trampoline itself reserves: the trampoline must set it last, just before
// the exec, or its own runtime dies while it still applies the policy.
func TestSmallAddressSpaceIsSetAfterTheTrampolineRan(t *testing.T) {
	requireSeccomp(t)
	const limit = 24 << 20
	p := confine.Policy{
		Dir:      t.TempDir(),
		ReadOnly: append(systemPaths(), "/bin", "/proc"),
		Landlock: confine.LandlockBestEffort,
		Seccomp:  confine.Seccomp{DenyFork: true, DenyNetwork: true, DenyPtrace: true},
		Rlimits:  confine.Rlimits{AddressSpace: limit},
	}
	out, err := start(t, p, nil, "/bin/cat", "/proc/self/limits")
	if err != nil {
		t.Fatalf("cat under RLIMIT_AS %d: %v\n%s", limit, err, out)
	}
	if want := "Max address space         25165824             25165824"; !strings.Contains(string(out), want) {
		t.Errorf("target's limits lack %q:\n%s", want, out)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/internal/steprpc"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// These tests run testexec as a real plugin process, started through
// go-plugin the way the host starts it: the test binary re-executes itself
// and runs main's body (the TestHelperProcess pattern).

const (
	helperEnv     = "TESTEXEC_TEST_HELPER"
	helperArgsEnv = "TESTEXEC_TEST_ARGS"
)

func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	os.Exit(run(strings.Fields(os.Getenv(helperArgsEnv)), os.Stdout, os.Stderr))
}

// hostPlugin is a minimal host side of the executor plugin.
type hostPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

func (hostPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("host side only")
}

func (hostPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return executorpb.NewExecutorClient(c), nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type launched struct {
	client *plugin.Client
	exec   executorpb.ExecutorClient
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// newPluginClient prepares a go-plugin client for testexec run with args.
func newPluginClient(t *testing.T, startTimeout time.Duration, args ...string) *launched {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = []string{helperEnv + "=1", helperArgsEnv + "=" + strings.Join(args, " "), "PATH=" + os.Getenv("PATH")}
	stderr := &syncBuffer{}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: plugin.HandshakeConfig{
			MagicCookieKey:   executorpb.MagicCookieKey,
			MagicCookieValue: executorpb.MagicCookieValue,
		},
		VersionedPlugins: map[int]plugin.PluginSet{executorpb.ProtocolVersion: {executorpb.PluginName: hostPlugin{}}},
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     startTimeout,
		Stderr:           stderr,
		Logger:           hclog.NewNullLogger(),
	})
	t.Cleanup(client.Kill)
	return &launched{client: client, cmd: cmd, stderr: stderr}
}

// launch starts testexec normally.
func launch(t *testing.T) *launched {
	t.Helper()
	l := newPluginClient(t, 30*time.Second)
	proto, err := l.client.Client()
	if err != nil {
		t.Fatalf("start testexec: %v\nstderr:\n%s", err, l.stderr)
	}
	raw, err := proto.Dispense(executorpb.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	l.exec = raw.(executorpb.ExecutorClient)
	return l
}

// step runs one step on a RunStep stream the way the host does, with no
// host services.
func (l *launched) step(ctx context.Context, attempt uint32, spec string, cp *executorpb.Checkpoint) (*executorpb.StepResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := l.exec.RunStep(ctx)
	if err != nil {
		return nil, err
	}
	return steprpc.Drive(ctx, stream, &executorpb.StepRequest{TaskId: "t", Attempt: attempt, Spec: []byte(spec), Checkpoint: cp},
		executorpb.UnimplementedHostServicesServer{}, steprpc.Limits{MaxMessage: 4 << 20})
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, what, cond)
}

// readPID waits for a pid file and returns its pid.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(string(b))
		return err == nil
	})
	return pid
}

func TestPluginRunsATask(t *testing.T) {
	l := launch(t)
	ctx := testContext(t)
	desc, err := l.exec.Describe(ctx, &executorpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if desc.GetKind() != "testexec" || desc.GetVersion() != "1.0.0" || len(desc.GetCheckpointSchemas()) != 1 || desc.GetCheckpointSchemas()[0] != "testexec/1" {
		t.Errorf("Describe = %v", desc)
	}

	// No host services endpoint: progress is skipped, the model call is
	// reported as unimplemented.
	spec := `{"goal":"g","testexec":{"steps":2,"progress":true}}`
	var cp *executorpb.Checkpoint
	for attempt := uint32(1); attempt <= 2; attempt++ {
		resp, err := l.step(ctx, attempt, spec, cp)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		if attempt == 1 {
			if resp.GetContinue().GetSummary() != "step 1" {
				t.Fatalf("attempt 1 = %v", resp)
			}
			cp = resp.GetContinue().GetCheckpoint()
			continue
		}
		if c := resp.GetComplete(); c.GetSummary() != "done after 2 steps" || string(c.GetResult()) != `{"steps":2}` {
			t.Fatalf("attempt 2 = %v", resp)
		}
	}
	resp, err := l.step(ctx, 3, `{"testexec":{"call_model":true}}`, nil)
	if err != nil || resp.GetContinue().GetSummary() != "model error: unimplemented" {
		t.Fatalf("call_model without host services = (%v, %v)", resp, err)
	}
}

func TestPluginCancel(t *testing.T) {
	l := launch(t)
	dir := t.TempDir()
	pidFile, marker := filepath.Join(dir, "pid"), filepath.Join(dir, "cancelled")
	ctx, cancel := context.WithCancel(testContext(t))
	errc := make(chan error, 1)
	go func() {
		_, err := l.step(ctx, 4, `{"testexec":{"sleep_ms":60000,"pid_file":"`+pidFile+`","cancel_marker":"`+marker+`"}}`, nil)
		errc <- err
	}()
	readPID(t, pidFile)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled step: %v, want context.Canceled", err)
	}
	waitFor(t, "the cancel marker", func() bool {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == "cancelled attempt=4"
	})
}

// TestPluginCrashes checks the scripted deaths: each fails the in-flight
// call with Unavailable and ends the process the way it says.
func TestPluginCrashes(t *testing.T) {
	tests := []struct {
		name       string
		options    string
		wantExit   int // -1: killed by a signal
		wantSignal syscall.Signal
		wantStderr string
	}{
		{name: "exit", options: `"exit_at_attempt":2`, wantExit: 7},
		{name: "kill", options: `"kill_at_attempt":2,"kill_after_ms":50`, wantExit: -1, wantSignal: syscall.SIGKILL},
		{name: "panic", options: `"panic_at_attempt":2`, wantExit: 2, wantStderr: "panic: testexec: scripted panic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := launch(t)
			pidFile := filepath.Join(t.TempDir(), "pid")
			spec := `{"testexec":{"steps":5,"pid_file":"` + pidFile + `",` + tt.options + `}}`
			ctx := testContext(t)
			// Attempt 1 is unaffected.
			if resp, err := l.step(ctx, 1, spec, nil); err != nil || resp.GetContinue() == nil {
				t.Fatalf("attempt 1 = (%v, %v)", resp, err)
			}
			_, err := l.step(ctx, 2, spec, nil)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("attempt 2: %v, want Unavailable", err)
			}
			waitFor(t, "the plugin to exit", l.client.Exited)
			ps := l.cmd.ProcessState
			if ps.ExitCode() != tt.wantExit {
				t.Errorf("exit code %d, want %d", ps.ExitCode(), tt.wantExit)
			}
			if tt.wantSignal != 0 {
				if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != tt.wantSignal {
					t.Errorf("wait status %v, want killed by %v", ps, tt.wantSignal)
				}
			}
			if tt.wantStderr != "" {
				waitFor(t, "stderr "+tt.wantStderr, func() bool { return strings.Contains(l.stderr.String(), tt.wantStderr) })
			}
			log, _ := os.ReadFile(pidFile + ".log")
			if want := "attempt 1 started\nattempt 2 started\n"; string(log) != want {
				t.Errorf("pid log %q, want %q", log, want)
			}
		})
	}
}

// TestPluginIgnoresCtxAndSIGTERM checks ignore_ctx: a SIGTERM and a
// cancelled call do not stop the step, which runs its full sleep.
func TestPluginIgnoresCtxAndSIGTERM(t *testing.T) {
	l := launch(t)
	dir := t.TempDir()
	pidFile, marker := filepath.Join(dir, "pid"), filepath.Join(dir, "cancelled")
	ctx, cancel := context.WithCancel(testContext(t))
	errc := make(chan error, 1)
	go func() {
		_, err := l.step(ctx, 1, `{"testexec":{"sleep_ms":300,"ignore_ctx":true,"pid_file":"`+pidFile+`","cancel_marker":"`+marker+`"}}`, nil)
		errc <- err
	}()
	pid := readPID(t, pidFile)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-errc
	// The step ran to its end in a live process: it then noticed the
	// cancellation and left the marker.
	waitFor(t, "the cancel marker", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if l.client.Exited() {
		t.Fatal("plugin died of SIGTERM")
	}
	started, err1 := os.Stat(pidFile)
	ended, err2 := os.Stat(marker)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	// File times are as coarse as the kernel's clock tick (up to 10 ms):
	// compare against the sleep with that much slack. A step cut short by
	// the cancel ends within a few ms of it, far below this.
	if d := ended.ModTime().Sub(started.ModTime()); d < 250*time.Millisecond {
		t.Errorf("step ended %v after it started: it did not sleep through the cancellation", d)
	}
	if _, err := l.exec.Describe(testContext(t), &executorpb.DescribeRequest{}); err != nil {
		t.Fatalf("plugin no longer serves: %v", err)
	}
}

func TestPluginSpawnsGrandchild(t *testing.T) {
	l := launch(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	spec := `{"testexec":{"steps":3,"spawn_grandchild":true,"pid_file":"` + pidFile + `"}}`
	if _, err := l.step(testContext(t), 1, spec, nil); err != nil {
		t.Fatal(err)
	}
	gpid := readPID(t, pidFile+".grandchild")
	t.Cleanup(func() { _ = syscall.Kill(gpid, syscall.SIGKILL) })
	if err := syscall.Kill(gpid, 0); err != nil {
		t.Fatalf("grandchild %d is not running: %v", gpid, err)
	}
	ppid, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(gpid), "stat"))
	if err == nil {
		// /proc/pid/stat: "pid (comm) state ppid ..."
		fields := strings.Fields(string(ppid[bytes.LastIndexByte(ppid, ')')+1:]))
		if want := strconv.Itoa(readPID(t, pidFile)); len(fields) < 2 || fields[1] != want {
			t.Errorf("grandchild parent = %v, want the plugin %s", fields, want)
		}
	}
	// A second step does not start another one.
	if _, err := l.step(testContext(t), 2, spec, nil); err != nil {
		t.Fatal(err)
	}
	if again := readPID(t, pidFile+".grandchild"); again != gpid {
		t.Errorf("second step started another grandchild %d (first %d)", again, gpid)
	}
}

// TestStartupMisbehaviour checks that each -startup mode makes go-plugin's
// start fail, as the host's registration tests expect.
func TestStartupMisbehaviour(t *testing.T) {
	for _, mode := range []string{"noise", "exit", "badhandshake", "badcookie", "hang"} {
		t.Run(mode, func(t *testing.T) {
			timeout := 30 * time.Second
			if mode == "hang" {
				timeout = 500 * time.Millisecond
			}
			l := newPluginClient(t, timeout, "-startup="+mode)
			if _, err := l.client.Client(); err == nil {
				t.Fatalf("-startup=%s: plugin started", mode)
			} else {
				t.Logf("-startup=%s: %v", mode, err)
			}
		})
	}
}

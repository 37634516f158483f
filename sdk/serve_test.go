package sdk

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/internal/steprpc"
	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// hostPlugin is the host's side of the executor plugin, as small as a test
// needs: the executor client.
type hostPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

type pluginConn struct {
	executor executorpb.ExecutorClient
}

func (hostPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("host side only")
}

func (hostPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &pluginConn{executor: executorpb.NewExecutorClient(c)}, nil
}

// launchedPlugin is a helper plugin process started through go-plugin the
// way the host starts an executor.
type launchedPlugin struct {
	*pluginConn
	client *plugin.Client
	cmd    *exec.Cmd
	stderr *syncBuffer
	fh     *fakeHost
}

// launchPlugin starts the "plugin" helper process, whose steps' service
// calls fh answers.
func launchPlugin(t *testing.T, fh *fakeHost) *launchedPlugin {
	t.Helper()
	cmd := helperCommand("plugin")
	stderr := &syncBuffer{}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshakeConfig(),
		VersionedPlugins: map[int]plugin.PluginSet{executorpb.ProtocolVersion: {executorpb.PluginName: hostPlugin{}}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     30 * time.Second,
		Stderr:           stderr,
		Logger:           hclog.NewNullLogger(),
	})
	t.Cleanup(client.Kill)
	proto, err := client.Client()
	if err != nil {
		t.Fatalf("start plugin: %v\nstderr:\n%s", err, stderr)
	}
	raw, err := proto.Dispense(executorpb.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	conn := raw.(*pluginConn)
	return &launchedPlugin{pluginConn: conn, client: client, cmd: cmd, stderr: stderr, fh: fh}
}

func (p *launchedPlugin) step(ctx context.Context, spec string) (*executorpb.StepResponse, error) {
	return driveStep(ctx, p.executor, &executorpb.StepRequest{
		TaskId: "task-1", Attempt: 1, TurnToken: "turn-1", Spec: []byte(spec),
	}, p.fh)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestServe runs Serve in a real plugin process started by go-plugin and
// drives it like the host: handshake, Describe, steps with host services
// on the step's stream, and the message limits on the real transport.
func TestServe(t *testing.T) {
	fh := &fakeHost{model: &executorpb.CallModelResponse{Message: &executorpb.ChatMessage{Role: "assistant", Content: "hi there"}}}
	p := launchPlugin(t, fh)
	ctx := testContext(t)

	if v := p.client.NegotiatedVersion(); v != executorpb.ProtocolVersion {
		t.Errorf("negotiated protocol version %d, want %d", v, executorpb.ProtocolVersion)
	}
	desc, err := p.executor.Describe(ctx, &executorpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if desc.GetKind() != "sdkhelper" || desc.GetVersion() != "1.2.3" || desc.GetProtocolVersion() != executorpb.ProtocolVersion {
		t.Errorf("Describe = %v", desc)
	}

	resp, err := p.step(ctx, `{"mode":"echo"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetComplete(); got.GetSummary() != "task-1 attempt 1" || string(got.GetResult()) != `{"mode":"echo"}` {
		t.Errorf("echo step = %v", resp)
	}

	// Host services on the step's stream, twice.
	for range 2 {
		resp, err = p.step(ctx, `{"mode":"model"}`)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetContinue().GetSummary(); got != "model said hi there" {
			t.Errorf("model step summary = %q", got)
		}
	}
	if got := fh.seenTokens(); len(got) != 2 || got[0] != "turn-1" || got[1] != "turn-1" {
		t.Errorf("host saw tokens %v", got)
	}

	// A host-services answer over the limit is refused by the plugin, and
	// not as an exhausted budget.
	fh.set(func(f *fakeHost) {
		f.model = &executorpb.CallModelResponse{Message: &executorpb.ChatMessage{Content: strings.Repeat("m", maxMessageBytes+1)}}
	})
	resp, err = p.step(ctx, `{"mode":"model"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetContinue().GetSummary(); !strings.Contains(got, ErrInvalidArgument.Error()) {
		t.Errorf("oversized host answer gave summary %q, want an invalid-argument error", got)
	}

	// A request over the limit is refused by the plugin's server.
	_, err = p.step(ctx, `{"mode":"echo","pad":"`+strings.Repeat("p", maxMessageBytes)+`"}`)
	if !errors.Is(err, steprpc.ErrProtocol) || !strings.Contains(err.Error(), "larger than max") {
		t.Errorf("oversized request: %v, want the plugin's refusal of a message larger than max", err)
	}

	// A result over the limit becomes a typed failure.
	resp, err = p.step(ctx, `{"mode":"big-result","bytes":5242880}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetFail().GetReason(); got != "result_too_large" {
		t.Errorf("oversized result: %v, want result_too_large", resp)
	}

	if out := p.stderr.String(); strings.Contains(out, "panic") {
		t.Errorf("plugin stderr:\n%s", out)
	}
}

// TestServeCancel cancels a running step from the host side and checks that
// cancellation reached the executor in the plugin process.
func TestServeCancel(t *testing.T) {
	fh := &fakeHost{called: make(chan string, 1)}
	p := launchPlugin(t, fh)
	marker := filepath.Join(t.TempDir(), "cancelled")

	ctx, cancel := context.WithCancel(testContext(t))
	errc := make(chan error, 1)
	go func() {
		_, err := p.step(ctx, `{"mode":"wait-cancel","marker":"`+marker+`"}`)
		errc <- err
	}()
	select {
	case <-fh.called: // the step is running
	case err := <-errc:
		t.Fatalf("step ended before it was cancelled: %v", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled step: %v, want context.Canceled", err)
	}
	waitFor(t, "the executor to see the cancellation", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})

	// The plugin serves the next step normally.
	resp, err := p.step(testContext(t), `{"mode":"echo"}`)
	if err != nil || resp.GetComplete() == nil {
		t.Fatalf("step after a cancelled one = (%v, %v)", resp, err)
	}
}

// TestServePanicCrashes checks that a panic in Step is not recovered: the
// call fails with Unavailable, the process dies with Go's panic status, and
// the panic is on stderr for the host to record.
func TestServePanicCrashes(t *testing.T) {
	p := launchPlugin(t, &fakeHost{})
	_, err := p.step(testContext(t), `{"mode":"panic"}`)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("panicking step: %v, want Unavailable", err)
	}
	waitFor(t, "the plugin to exit", p.client.Exited)
	if code := p.cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("plugin exit code %d, want 2 (Go panic)", code)
	}
	waitFor(t, "the panic on stderr", func() bool {
		return strings.Contains(p.stderr.String(), "panic: sdk test: scripted panic")
	})
}

// TestServeSIGTERM stops a plugin the way the host does, with SIGTERM while
// a step runs: the step's context is cancelled and the executor gets to
// finish before the process dies of the signal.
func TestServeSIGTERM(t *testing.T) {
	fh := &fakeHost{called: make(chan string, 1)}
	p := launchPlugin(t, fh)
	marker := filepath.Join(t.TempDir(), "cancelled")

	errc := make(chan error, 1)
	go func() {
		_, err := p.step(testContext(t), `{"mode":"wait-cancel","marker":"`+marker+`"}`)
		errc <- err
	}()
	<-fh.called // the step is running
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Canceled if the answer made it out before the process ended.
	if err := <-errc; status.Code(err) != codes.Canceled && status.Code(err) != codes.Unavailable {
		t.Errorf("step during SIGTERM: %v, want Canceled or Unavailable", err)
	}
	waitFor(t, "the plugin to exit", p.client.Exited)
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the executor did not see its context end before the exit: %v", err)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("plugin ended with %v, want killed by SIGTERM", p.cmd.ProcessState)
	}
}

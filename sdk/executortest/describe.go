package executortest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// description is what an executor binary says about itself.
type description struct {
	Kind              string
	Version           string
	ProtocolVersion   uint32
	CheckpointSchemas []string
	Capabilities      []string
	Runtime           map[string]string
}

func (d description) String() string {
	return fmt.Sprintf("kind %q version %q, protocol %d, checkpoint schemas %q, capabilities %q, runtime %v",
		d.Kind, d.Version, d.ProtocolVersion, d.CheckpointSchemas, d.Capabilities, d.Runtime)
}

// describeBinary starts binary the way the host does (go-plugin over gRPC,
// with the protocol's handshake), asks it to Describe itself and stops it.
func describeBinary(ctx context.Context, binary string, in *Interpreted) (description, error) {
	stderr := &lockedTail{max: 4 << 10}
	argv := in.argv(binary)
	cmd := exec.Command(argv[0], argv[1:]...)
	// Like the host: no environment beyond the harmless basics.
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: plugin.HandshakeConfig{
			ProtocolVersion:  executorpb.ProtocolVersion,
			MagicCookieKey:   executorpb.MagicCookieKey,
			MagicCookieValue: executorpb.MagicCookieValue,
		},
		VersionedPlugins: map[int]plugin.PluginSet{
			executorpb.ProtocolVersion: {executorpb.PluginName: describePlugin{}},
		},
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     10 * time.Second,
		Logger:           hclog.NewNullLogger(),
		Stderr:           stderr,
	})
	defer client.Kill()

	fail := func(what string, err error) (description, error) {
		msg := fmt.Sprintf("%s: %v", what, err)
		if tail := stderr.String(); tail != "" {
			msg += "\nthe executor's stderr ends with:\n" + tail
		}
		return description{}, errors.New(msg)
	}
	rpc, err := client.Client()
	if err != nil {
		return fail("start and handshake", err)
	}
	raw, err := rpc.Dispense(executorpb.PluginName)
	if err != nil {
		return fail("dispense the executor service", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := raw.(executorpb.ExecutorClient).Describe(ctx, &executorpb.DescribeRequest{})
	if err != nil {
		return fail("Describe", err)
	}
	return description{
		Kind: r.GetKind(), Version: r.GetVersion(), ProtocolVersion: r.GetProtocolVersion(),
		CheckpointSchemas: r.GetCheckpointSchemas(), Capabilities: r.GetCapabilities(), Runtime: r.GetRuntime(),
	}, nil
}

// describePlugin is the client half of the executor plugin, enough to call
// Describe.
type describePlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

func (describePlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("executortest: the kit does not serve executors")
}

func (describePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return executorpb.NewExecutorClient(conn), nil
}

// lockedTail keeps the last max bytes written to it.
type lockedTail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *lockedTail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *lockedTail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.TrimSpace(w.buf))
}

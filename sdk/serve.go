package sdk

import (
	"context"
	"errors"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// Serve runs e as a taskhost executor plugin. Call it from main; it returns
// when the host stops the plugin.
//
// Print nothing to stdout before calling Serve: go-plugin's handshake is the
// first line on stdout. Serve exits the process with status 1 when e
// describes itself invalidly. On SIGTERM, and when the host process dies,
// Serve cancels the running step's context, waits briefly for Step to
// return, and ends the process (by SIGTERM, or with status 3 when
// orphaned).
func Serve(e Executor) {
	logger := newLogger()
	if e == nil {
		logger.Error("sdk.Serve: nil executor")
		os.Exit(1)
	}
	if err := validateDescription(identity(e)); err != nil {
		logger.Error("invalid executor description", "error", err)
		os.Exit(1)
	}
	gate := newStepGate()
	stopOnSignalOrOrphan(logger, gate)
	plugin.Serve(serveConfig(e, gate, logger))
}

// identity is what Serve validates before the handshake: an Identifier's
// kind and version, without waiting for its Describe; else the whole
// description.
func identity(e Executor) Description {
	id, ok := e.(Identifier)
	if !ok {
		return e.Describe()
	}
	var d Description
	d.Kind, d.Version = id.Identity()
	return d
}

// processStderr is the process's stderr (fd 2) as it started: go-plugin's
// Serve later points os.Stderr at a pipe of its own, relayed over gRPC.
// Set once at package init and never changed.
var processStderr = os.Stderr

// Logger returns a logger for an executor's own log lines. It writes hclog
// JSON lines to the process's stderr, which the host reads: each line lands
// in the host's log at its level, with its fields and the task, run,
// attempt and executor it came from, and the last lines are kept with an
// attempt that crashes. The host bounds what it takes (a line is cut at
// 2 KiB, at most 16 fields are kept, lines beyond a burst of 100 and 50 a
// second are dropped and counted), so log what an operator needs, not
// prompts, tool arguments, results or credentials. Lines below level Info
// are not written; use Logger().SetLevel to change that.
func Logger() hclog.Logger { return newLogger() }

// newLogger logs JSON lines to the process's stderr, which the host parses
// and re-logs with their levels.
func newLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "executor",
		Level:      hclog.Info,
		Output:     processStderr,
		JSONFormat: true,
	})
}

func handshakeConfig() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		// The protocol version is the one VersionedPlugins names.
		MagicCookieKey:   executorpb.MagicCookieKey,
		MagicCookieValue: executorpb.MagicCookieValue,
	}
}

func serveConfig(e Executor, gate *stepGate, logger hclog.Logger) *plugin.ServeConfig {
	return &plugin.ServeConfig{
		HandshakeConfig: handshakeConfig(),
		VersionedPlugins: map[int]plugin.PluginSet{
			executorpb.ProtocolVersion: {executorpb.PluginName: &grpcPlugin{exec: e, gate: gate, logger: logger}},
		},
		GRPCServer: newGRPCServer,
		Logger:     logger,
	}
}

// newGRPCServer bounds messages both ways at the protocol's limit; grpc's
// own server defaults are 4 MiB in but ~2 GiB out. Its flow-control
// windows are fixed at that limit, so that a message never waits for a
// window update, and grpc's dynamic windows, which send a ping for about
// every message a step exchanges, are off.
func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(maxMessageBytes), grpc.MaxSendMsgSize(maxMessageBytes),
		grpc.InitialWindowSize(maxMessageBytes), grpc.InitialConnWindowSize(maxMessageBytes))
	return grpc.NewServer(opts...)
}

// grpcPlugin is the executor as a go-plugin plugin. Only the plugin side
// lives in the SDK; the host has its own client.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin

	exec   Executor
	gate   *stepGate
	logger hclog.Logger
}

var _ plugin.GRPCPlugin = (*grpcPlugin)(nil)

// GRPCServer registers the executor service. go-plugin's broker goes
// unused: host services travel on each step's own stream.
func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	executorpb.RegisterExecutorServer(s, newExecutorServer(p.exec, p.gate, p.logger))
	return nil
}

func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("sdk: the executor SDK implements only the plugin side")
}

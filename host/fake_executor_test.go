package host

import (
	"context"
	"sync"

	"github.com/taskhost/taskhost/host/plugin"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// fakeLauncher is a Launcher in the style of Nomad's MockDriver: each
// method calls its function field when set and otherwise does the simplest
// thing that works — Launch hands out Exe, Describe answers Exe's
// description. It lets the Runner's decisions be tested in-process, without
// building or starting a plugin.
type fakeLauncher struct {
	LaunchF   func(ctx context.Context, kind string, services plugin.Services) (plugin.Executor, error)
	DescribeF func(kind string) (plugin.Description, error)
	// Exe is what Launch returns when LaunchF is unset.
	Exe *fakeExecutor

	mu       sync.Mutex
	services []plugin.Services // what each Launch was given, in order
}

func (l *fakeLauncher) Launch(ctx context.Context, kind string, services plugin.Services) (plugin.Executor, error) {
	l.mu.Lock()
	l.services = append(l.services, services)
	l.mu.Unlock()
	if l.LaunchF != nil {
		return l.LaunchF(ctx, kind, services)
	}
	return l.Exe, nil
}

func (l *fakeLauncher) Describe(kind string) (plugin.Description, error) {
	if l.DescribeF != nil {
		return l.DescribeF(kind)
	}
	return fakeDescription(kind), nil
}

// lastServices is the gRPC HostServices server of the last Launch: a fake
// step calls it the way a plugin would, over the same methods and codes.
func (l *fakeLauncher) lastServices() pb.HostServicesServer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.services) == 0 {
		return nil
	}
	return plugin.NewServicesServer(l.services[len(l.services)-1])
}

// fakeKind is the executor kind the seam tests register.
const fakeKind = "fake"

// fakeDescription is a description plugin.DescribeChecked accepts.
func fakeDescription(kind string) plugin.Description {
	return plugin.Description{Kind: kind, Version: "0.0.0-test", ProtocolVersion: pb.ProtocolVersion, CheckpointSchemas: []string{"fake/1"}}
}

// fakeExecutor is an Executor whose process is simulated: exit closes
// Exited with a status, as a plugin that died would. Every Step request is
// recorded so a test can check what the Runner sent.
type fakeExecutor struct {
	DescribeF func(ctx context.Context) (plugin.Description, error)
	StepF     func(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error)
	StopF     func()

	// StderrTailText is what StderrTail returns.
	StderrTailText string

	once   sync.Once
	exited chan struct{}

	mu     sync.Mutex
	status plugin.ExitStatus
	steps  []plugin.StepRequest
	stops  int
}

func newFakeExecutor() *fakeExecutor {
	return &fakeExecutor{exited: make(chan struct{})}
}

func (e *fakeExecutor) Describe(ctx context.Context) (plugin.Description, error) {
	if e.DescribeF != nil {
		return e.DescribeF(ctx)
	}
	return fakeDescription(fakeKind), nil
}

func (e *fakeExecutor) Step(ctx context.Context, req plugin.StepRequest) (plugin.StepResult, error) {
	e.mu.Lock()
	e.steps = append(e.steps, req)
	e.mu.Unlock()
	if e.StepF != nil {
		return e.StepF(ctx, req)
	}
	return plugin.StepResult{Outcome: plugin.OutcomeComplete, Summary: "done"}, nil
}

func (e *fakeExecutor) Exited() <-chan struct{} { return e.exited }

func (e *fakeExecutor) ExitStatus() plugin.ExitStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

func (e *fakeExecutor) StderrTail() string { return e.StderrTailText }

// Stop ends the simulated process as the real one does: once, with a kill
// when nothing else ended it first.
func (e *fakeExecutor) Stop() {
	e.mu.Lock()
	e.stops++
	e.mu.Unlock()
	if e.StopF != nil {
		e.StopF()
	}
	e.exit(plugin.ExitStatus{Code: -1, Signal: "killed"})
}

// exit simulates the process ending with st; only the first call counts.
func (e *fakeExecutor) exit(st plugin.ExitStatus) {
	e.once.Do(func() {
		e.mu.Lock()
		e.status = st
		e.mu.Unlock()
		close(e.exited)
	})
}

// stepRequests returns the Step requests received so far.
func (e *fakeExecutor) stepRequests() []plugin.StepRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]plugin.StepRequest(nil), e.steps...)
}

func (e *fakeExecutor) stopCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stops
}

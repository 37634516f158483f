// Package api is the taskhost daemon's gRPC API (shared/proto/api.proto,
// package taskhost.api.v1): the task, approval and host services a client
// such as the taskhost CLI calls over the daemon's unix socket or its
// optional loopback token listener.
//
// Every call is authenticated in one place (the interceptors of auth.go): on
// the unix socket the caller's uid comes from the socket's peer credentials
// (SO_PEERCRED) and is mapped to a principal name; on the TCP listener a
// bearer token is hashed and matched. A caller that maps to no principal is
// refused before its request is looked at. Each handler then acts for that
// principal only; a task of another principal is indistinguishable from one
// that does not exist.
package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/taskhost/taskhost/internal/uids"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// APIVersion is the version of the API package this server speaks.
const APIVersion = "v1"

// Bounds of requests and responses.
const (
	maxRequestBytes    = 1 << 20 // a spec is at most limits.spec_bytes (16 KiB)
	defaultPageSize    = 100
	maxPageSize        = 500
	defaultAttempts    = 50
	maxAttempts        = 500
	maxApprovals       = 500
	eventBatch         = 100
	defaultMaxWatchers = 256
	defaultMaxWatches  = 32
	maxSpecBytes       = 64 << 10
	maxIDBytes         = 64
	maxStatusFilters   = 8 // every status once (taskStatuses)
)

// Tasks is what the API needs of the Runner; *host.Runner implements it.
type Tasks interface {
	Create(ctx context.Context, principal string, req host.CreateRequest) (store.Task, error)
	Resume(ctx context.Context, principal, id string) (store.Task, error)
	Cancel(ctx context.Context, principal, id string) (store.Task, error)
	Get(ctx context.Context, principal, id string) (store.Task, error)
	List(ctx context.Context, principal string, q store.ListQuery) ([]store.Task, error)
	// Count counts the tasks List would list over all pages.
	Count(ctx context.Context, principal string, q store.ListQuery) (int64, error)
	Attempts(ctx context.Context, principal, id string) ([]store.Attempt, error)
	// Events blocks until there is at least one event after after, or ctx
	// ends.
	Events(ctx context.Context, principal, id string, after int64) ([]store.Event, error)
	Approvals(ctx context.Context, principal string, st store.ApprovalStatus) ([]store.Approval, error)
	Approve(ctx context.Context, principal, id string) (store.Approval, error)
	ApproveForTask(ctx context.Context, principal, id, pattern string) (store.Approval, error)
	// Answer approves an input approval with a JSON value.
	Answer(ctx context.Context, principal, id string, value []byte) (store.Approval, error)
	Reject(ctx context.Context, principal, id string) (store.Approval, error)
}

// EventLog reads events without waiting; *store.Store implements it.
type EventLog interface {
	Events(ctx context.Context, principal, id string, afterSeq int64, limit int) ([]store.Event, error)
}

// Executors is what the API shows of the executor registry;
// *plugin.Registry implements it.
type Executors interface {
	Kinds() []string
	Describe(kind string) (plugin.Description, error)
	Spec(kind string) (plugin.PluginSpec, bool)
}

// ModelCheck reports the model provider's preflight; *model.Checker
// implements it.
type ModelCheck interface {
	Status() model.Status
	Check(ctx context.Context) model.Status
}

// Fleet is what the API shows of the hosts sharing the daemon's store;
// *host.Runner implements it.
type Fleet interface {
	Hosts(ctx context.Context) (host.Fleet, error)
	// TaskHost is the host that holds (or last held) the run of
	// principal's task id.
	TaskHost(ctx context.Context, principal, id string) (string, error)
}

// Options configure a Server.
type Options struct {
	Tasks     Tasks
	Events    EventLog
	Executors Executors
	// Model reports the model provider's preflight in ListExecutors; nil
	// leaves it out.
	Model ModelCheck

	// Principals maps a unix uid to its principal name.
	Principals map[uint32]string
	// Tokens maps a principal name to the SHA-256 (lowercase hex) of its
	// bearer token, for the TCP listener.
	Tokens map[string]string
	// Sandbox is the range of uids the daemon runs untrusted processes
	// under (shell.run commands): a peer with one of them is refused
	// whatever it does inside, and no principal may be one. Zero: none.
	Sandbox uids.Range

	DefaultExecutor string
	Version         string // the daemon's version, reported by GetInfo
	// MaxWatchers bounds concurrent WatchTask streams (default 256).
	MaxWatchers int
	// MaxWatchesPerPrincipal bounds one principal's concurrent WatchTask
	// streams (default 32, at most MaxWatchers), so that no principal can
	// hold every slot.
	MaxWatchesPerPrincipal int
	// MaxRunningPerPrincipal bounds one principal's tasks that are pending,
	// running or waiting for an approval: a create or resume beyond it is
	// refused. 0 means no bound of its own (the Runner's max_concurrent
	// still holds).
	MaxRunningPerPrincipal int
	// Listener bounds the TCP token listener (zero fields: defaults).
	Listener ListenerLimits
	// WorkspaceRoot holds the task workspaces ListTaskFiles and
	// ReadTaskFile read; "" disables both (Unimplemented).
	WorkspaceRoot string
	// StoredWorkspaces, when set, gives ListTaskFiles and ReadTaskFile the
	// workspace of a task whose run this host neither holds nor last held
	// as the store holds it (its last committed step), not the host's
	// absent or stale copy.
	StoredWorkspaces StoredWorkspaces
	// MaxExportFileBytes bounds a file ReadTaskFile sends (default
	// DefaultMaxExportFileBytes).
	MaxExportFileBytes int64
	// Deleter deletes tasks for DeleteTask; nil disables it.
	Deleter Deleter
	// Admins are the principals that may get, list, cancel and resume
	// every principal's tasks, through AdminActs (nil: no admins).
	Admins    []string
	AdminActs AdminActs
	// Effects lists unsettled effects in GetTask and resolves them for
	// ResolveEffect; nil leaves the list out and ResolveEffect
	// Unimplemented.
	Effects Effects
	// Ready, when set, is asked by every grpc.health.v1 Check: an error
	// (the store does not answer a read) reports NOT_SERVING.
	Ready func(ctx context.Context) error
	// Reloader reloads the executor config for ReloadExecutors; nil
	// disables it (Unimplemented).
	Reloader ExecutorReloader
	// Fleet lists the hosts for ListHosts and names a task's host in
	// GetTask; nil disables ListHosts (Unimplemented) and leaves
	// lease_host empty.
	Fleet  Fleet
	Logger hclog.Logger
}

// Server serves the API. Create it with New, start it with Serve, stop it
// with Stop.
type Server struct {
	opts     Options
	log      hclog.Logger
	auth     *authenticator
	grpc     *grpc.Server
	watchers chan struct{} // a slot per running watch stream
	quotas   *quotas
	pages    *pageCipher
	exports  chan struct{} // a slot per running ReadTaskFile stream
	admins   map[string]bool
	health   *healthService

	closing   chan struct{} // closed when Stop begins
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New returns a Server over opts.
func New(opts Options) (*Server, error) {
	if opts.Tasks == nil || opts.Events == nil || opts.Executors == nil {
		return nil, errors.New("api: Tasks, Events and Executors are required")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.MaxWatchers <= 0 {
		opts.MaxWatchers = defaultMaxWatchers
	}
	if opts.MaxWatchesPerPrincipal <= 0 {
		opts.MaxWatchesPerPrincipal = min(defaultMaxWatches, opts.MaxWatchers)
	}
	if opts.MaxRunningPerPrincipal < 0 {
		return nil, fmt.Errorf("api: MaxRunningPerPrincipal is %d: want 0 (no bound) or more", opts.MaxRunningPerPrincipal)
	}
	opts.Listener = opts.Listener.withDefaults()
	if opts.MaxExportFileBytes <= 0 {
		opts.MaxExportFileBytes = DefaultMaxExportFileBytes
	}
	auth, err := newAuthenticator(opts.Principals, opts.Tokens, opts.Sandbox, newPeerTable(opts.Listener, opts.Logger))
	if err != nil {
		return nil, err
	}
	pages, err := newPageCipher()
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts: opts, log: opts.Logger, auth: auth,
		watchers: make(chan struct{}, opts.MaxWatchers),
		quotas:   newQuotas(),
		pages:    pages,
		exports:  make(chan struct{}, maxExports),
		admins:   map[string]bool{},
		closing:  make(chan struct{}),
	}
	for _, a := range opts.Admins {
		s.admins[a] = true
	}
	s.grpc = grpc.NewServer(
		grpc.Creds(transportCredentials{}),
		// An oversized header list is reset by the HTTP/2 layer; the
		// authenticator never sees it.
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.ConnectionTimeout(opts.Listener.FirstRequestTimeout),
		grpc.MaxRecvMsgSize(maxRequestBytes),
		grpc.MaxSendMsgSize(16<<20),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	apipb.RegisterTaskServiceServer(s.grpc, &taskService{s: s})
	apipb.RegisterApprovalServiceServer(s.grpc, &approvalService{s: s})
	apipb.RegisterHostServiceServer(s.grpc, &hostService{s: s})
	s.registerOperability(s.grpc) // health.go: grpc.health.v1 and reflection
	return s, nil
}

// Serve serves ln until Stop. Serve as many listeners as needed; each is
// closed by Stop. A TCP listener is served through the ListenerLimits.
func (s *Server) Serve(ln net.Listener) {
	switch ln.Addr().Network() {
	case "tcp", "tcp4", "tcp6":
		ln = newGuardListener(ln, s.opts.Listener)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("api listener stopped", "addr", ln.Addr().String(), "error", err)
		}
	}()
}

// Stop stops the server: the listeners close, watch streams of tasks that
// are still running end with Unavailable (their clients reconnect), calls
// in flight may finish until ctx ends, and then every connection is closed.
func (s *Server) Stop(ctx context.Context) {
	s.closeOnce.Do(func() { close(s.closing) })
	s.shutdownHealth()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
	s.wg.Wait()
}

// errClosing is the status a call gets while the daemon stops.
func errClosing() error {
	return statusError(codes.Unavailable, ReasonShuttingDown, "the taskhost daemon is shutting down; retry when it is back")
}

func (s *Server) stopping() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// Package metrics serves the daemon's /metrics (the Prometheus text
// exposition format, version 0.0.4, written by hand: no client library) and
// /healthz over plain HTTP on an optional loopback listener
// ([api] metrics_listen).
//
// Every series is read from the store at scrape time, so the numbers are
// those of the store, the only source of truth, and survive a restart: the
// counters of finished attempts never go down because a finished attempt
// is never rewritten. Every label takes its values from a closed set (the
// store's statuses and outcomes), so the exposition has a bounded size
// however many tasks there are.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/store"
)

// Bounds of the listener. It serves operators' tools on the same machine:
// a few concurrent requests, each answered from one store read.
const (
	maxInFlight       = 8
	readTimeout       = 5 * time.Second // one store read, a scrape or a health check
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 10 * time.Second
	maxHeaderBytes    = 8 << 10
)

// Source is what the handlers read; *store.Store implements it.
type Source interface {
	Stats(ctx context.Context) (store.Stats, error)
	Ping(ctx context.Context) error
}

// Options configure a Server.
type Options struct {
	Source  Source
	Version string // the daemon's version, for taskhost_build_info
	Logger  hclog.Logger
}

// Server holds the handlers' state: whether the daemon serves its API, and
// the store reads that failed.
type Server struct {
	opts       Options
	log        hclog.Logger
	serving    atomic.Bool
	readErrors atomic.Int64
	inFlight   chan struct{}
	http       *http.Server
}

// New returns a Server over opts. It reports the daemon as not serving
// until SetServing(true).
func New(opts Options) (*Server, error) {
	if opts.Source == nil {
		return nil, errors.New("metrics: Source is required")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	s := &Server{opts: opts, log: opts.Logger, inFlight: make(chan struct{}, maxInFlight)}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", s.bounded(s.metrics))
	mux.HandleFunc("/healthz", s.bounded(s.healthz))
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          opts.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	return s, nil
}

// SetServing says whether the daemon serves its API: /healthz is 503 while
// it does not (before start-up completes, and from the start of a stop).
func (s *Server) SetServing(v bool) { s.serving.Store(v) }

// Handler is the HTTP handler of /metrics and /healthz, for tests and for
// mounting elsewhere.
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Listen listens on addr, which must be a loopback IP and port; the address
// actually bound is checked again.
func Listen(addr string) (net.Listener, error) {
	if err := config.CheckLoopback(addr); err != nil {
		return nil, fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	if err := config.CheckLoopback(ln.Addr().String()); err != nil {
		ln.Close()
		return nil, fmt.Errorf("metrics listener: bound %s: %w", ln.Addr(), err)
	}
	return ln, nil
}

// Serve serves ln until Close.
func (s *Server) Serve(ln net.Listener) {
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("metrics listener stopped", "addr", ln.Addr().String(), "error", err)
		}
	}()
}

// Close stops the listener, letting requests in flight finish until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	s.SetServing(false)
	if err := s.http.Shutdown(ctx); err != nil {
		return errors.Join(err, s.http.Close())
	}
	return nil
}

// bounded refuses methods other than GET and HEAD, and requests beyond
// maxInFlight, before the handler reads the store.
func (s *Server) bounded(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: use GET", http.StatusMethodNotAllowed)
			return
		}
		select {
		case s.inFlight <- struct{}{}:
			defer func() { <-s.inFlight }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("busy: %d requests in flight", maxInFlight), http.StatusServiceUnavailable)
			return
		}
		h(w, r)
	}
}

// healthz is 200 "ok" when the daemon serves its API and the store answers
// a read, else 503 with the reason.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.Health(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "unavailable: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Health returns nil when the daemon serves its API and the store answers a
// read, else the reason it is not healthy.
func (s *Server) Health(ctx context.Context) error {
	if !s.serving.Load() {
		return errors.New("the daemon is not serving its API (starting or stopping)")
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	if err := s.opts.Source.Ping(ctx); err != nil {
		s.readErrors.Add(1)
		return fmt.Errorf("the store does not answer a read: %w", err)
	}
	return nil
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	st, err := s.opts.Source.Stats(ctx)
	if err != nil {
		s.readErrors.Add(1)
		s.log.Warn("metrics: store read failed", "error", err)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	s.write(&b, st, err == nil)
	_, _ = io.WriteString(w, b.String())
}

// Closed label sets: the store's CHECK constraints. A value outside them
// (a newer store read by an older binary) is not exported, so the series
// stay bounded.
var (
	taskStatuses = []store.Status{
		store.StatusPending, store.StatusRunning, store.StatusWaitingApproval, store.StatusCompleted,
		store.StatusFailed, store.StatusCancelled, store.StatusInterrupted,
	}
	finishedAttempts = []store.AttemptStatus{store.AttemptCompleted, store.AttemptFailed, store.AttemptInterrupted, store.AttemptCancelled}
	outcomes         = []string{"continue", "complete", "fail", ""}
)

// write writes the exposition. Without a store read (ok false) the series
// read from the store are left out, which a scraper shows as absent rather
// than as zeros.
func (s *Server) write(b *strings.Builder, st store.Stats, ok bool) {
	family(b, "taskhost_build_info", "gauge", "The daemon's version and Go version; always 1.")
	fmt.Fprintf(b, "taskhost_build_info{version=%s,goversion=%s} 1\n", label(s.opts.Version), label(runtime.Version()))
	family(b, "taskhost_serving", "gauge", "1 while the daemon serves its API, 0 while it starts or stops.")
	fmt.Fprintf(b, "taskhost_serving %d\n", boolInt(s.serving.Load()))
	family(b, "taskhost_store_up", "gauge", "1 when this scrape's store read succeeded, else 0.")
	fmt.Fprintf(b, "taskhost_store_up %d\n", boolInt(ok))
	family(b, "taskhost_store_read_errors_total", "counter", "Store reads of /metrics and /healthz that failed since the daemon started.")
	fmt.Fprintf(b, "taskhost_store_read_errors_total %d\n", s.readErrors.Load())
	if !ok {
		return
	}
	family(b, "taskhost_tasks", "gauge", "Tasks by status, of every principal.")
	for _, status := range taskStatuses {
		fmt.Fprintf(b, "taskhost_tasks{status=%s} %d\n", label(string(status)), st.Tasks[status])
	}
	family(b, "taskhost_running_plugins", "gauge", "Tasks running or waiting for an approval: each holds one executor process.")
	fmt.Fprintf(b, "taskhost_running_plugins %d\n", st.Tasks[store.StatusRunning]+st.Tasks[store.StatusWaitingApproval])
	family(b, "taskhost_steps_running", "gauge", "Step attempts running now.")
	fmt.Fprintf(b, "taskhost_steps_running %d\n", st.Attempts[store.AttemptKey{Status: store.AttemptRunning}])
	family(b, "taskhost_steps_total", "counter", "Finished step attempts by status and outcome (none: the step returned no outcome, e.g. a crash).")
	for _, status := range finishedAttempts {
		for _, outcome := range outcomes {
			name := outcome
			if name == "" {
				name = "none"
			}
			fmt.Fprintf(b, "taskhost_steps_total{status=%s,outcome=%s} %d\n", label(string(status)), label(name),
				st.Attempts[store.AttemptKey{Status: status, Outcome: outcome}])
		}
	}
	family(b, "taskhost_approvals_pending", "gauge", "Approvals waiting for a decision.")
	fmt.Fprintf(b, "taskhost_approvals_pending %d\n", st.PendingApprovals)
}

func family(b *strings.Builder, name, typ, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// label quotes a label value as the exposition format wants it.
func label(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(v) + `"`
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

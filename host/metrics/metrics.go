// Package metrics serves the daemon's /metrics (the Prometheus exposition,
// written by github.com/prometheus/client_golang from a registry of this
// Server's own) and /healthz over plain HTTP on an optional loopback listener
// ([api] metrics_listen).
//
// Two kinds of series are exported:
//
//   - Read from the store at scrape time (a custom Collector): tasks by
//     status, finished step attempts by status and outcome, the effect
//     ledger by kind and status, tasks that ended on a budget by budget,
//     pending approvals. They are the store's numbers, the only source of
//     truth, so they survive a restart: the counters of finished attempts
//     never go down because a finished attempt is never rewritten.
//   - Counted as they happen by [Instruments], which the host is given as
//     its Observer: plugin starts and crashes by executor (and reason),
//     step durations by executor and attempt status, store commit
//     latency. They start from zero with the daemon.
//
// Every label takes its values from a closed set (the store's statuses,
// kinds and reasons, the configured executor kinds), so the exposition has a
// bounded size however many tasks there are.
package metrics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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

// PoolSource is a Source whose connection pool's statistics are exported
// too; *store.Store implements it.
type PoolSource interface {
	PoolStats() sql.DBStats
}

// Options configure a Server.
type Options struct {
	Source  Source
	Version string // the daemon's version, for taskhost_build_info
	Logger  hclog.Logger
	// Instruments are the live series the host reports to; nil: a fresh
	// set nobody reports to.
	Instruments *Instruments
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
	if opts.Instruments == nil {
		opts.Instruments = NewInstruments()
	}
	s := &Server{opts: opts, log: opts.Logger, inFlight: make(chan struct{}, maxInFlight)}
	reg := prometheus.NewRegistry()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskhost_build_info", Help: "The daemon's version and Go version; always 1."},
		[]string{"version", "goversion"})
	build.WithLabelValues(opts.Version, runtime.Version()).Set(1)
	cs := []prometheus.Collector{
		build,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskhost_serving", Help: "1 while the daemon serves its API, 0 while it starts or stops."},
			func() float64 { return boolFloat(s.serving.Load()) }),
		newStoreCollector(s),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	if ps, ok := opts.Source.(PluginPoolSource); ok {
		cs = append(cs, newPoolCollector(ps))
	}
	for _, c := range append(cs, opts.Instruments.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	errLog := opts.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	exposition := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: errLog, ErrorHandling: promhttp.ContinueOnError})
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.bounded(exposition.ServeHTTP))
	mux.HandleFunc("/healthz", s.bounded(s.healthz))
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errLog,
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
	effectKinds      = []store.EffectKind{store.EffectModel, store.EffectTool, store.EffectApproval}
	effectStatuses   = []store.EffectStatus{store.EffectAdmitted, store.EffectDispatching, store.EffectObserved,
		store.EffectFailed, store.EffectIndeterminate}
)

// storeCollector reads the store once per scrape.
type storeCollector struct {
	s *Server

	up, readErrors, tasks, runningPlugins, stepsRunning, steps, effects, budgets, approvals *prometheus.Desc
	poolInUse, poolOpen, poolWaits, poolWaitSeconds                                         *prometheus.Desc
}

func newStoreCollector(s *Server) *storeCollector {
	d := prometheus.NewDesc
	return &storeCollector{
		s:               s,
		up:              d("taskhost_store_up", "1 when this scrape's store read succeeded, else 0.", nil, nil),
		readErrors:      d("taskhost_store_read_errors_total", "Store reads of /metrics and /healthz that failed since the daemon started.", nil, nil),
		tasks:           d("taskhost_tasks", "Tasks by status, of every principal.", []string{"status"}, nil),
		runningPlugins:  d("taskhost_running_plugins", "Tasks running or waiting for an approval: each holds one executor process.", nil, nil),
		stepsRunning:    d("taskhost_steps_running", "Step attempts running now.", nil, nil),
		steps:           d("taskhost_steps_total", "Finished step attempts by status and outcome (none: the step returned no outcome, e.g. a crash).", []string{"status", "outcome"}, nil),
		effects:         d("taskhost_effects", "Effects in the ledger (model calls, tool calls, approvals) by kind and status.", []string{"kind", "status"}, nil),
		budgets:         d("taskhost_budget_exhausted_tasks", "Stored tasks that ended because a budget ran out, by budget.", []string{"budget"}, nil),
		approvals:       d("taskhost_approvals_pending", "Approvals waiting for a decision.", nil, nil),
		poolInUse:       d("taskhost_store_pool_in_use", "Store connections in use now (writes' pool; PostgreSQL's heartbeat and LISTEN connections are apart).", nil, nil),
		poolOpen:        d("taskhost_store_pool_open", "Store connections open now, in use or idle.", nil, nil),
		poolWaits:       d("taskhost_store_pool_waits_total", "Times a store call waited for a free connection since the store was opened.", nil, nil),
		poolWaitSeconds: d("taskhost_store_pool_wait_seconds_total", "Total time store calls waited for a free connection since the store was opened.", nil, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.readErrors, c.tasks, c.runningPlugins, c.stepsRunning, c.steps, c.effects, c.budgets, c.approvals,
		c.poolInUse, c.poolOpen, c.poolWaits, c.poolWaitSeconds} {
		ch <- d
	}
}

// Collect reads the store. Without a store read the series read from it are
// left out, which a scraper shows as absent rather than as zeros. The read
// error count is reported here, after the read, so that a scrape whose read
// failed counts itself (the registry runs collectors concurrently).
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	if ps, ok := c.s.opts.Source.(PoolSource); ok {
		// The pool's own numbers need no store read: they are there
		// when the store is not.
		p := ps.PoolStats()
		ch <- prometheus.MustNewConstMetric(c.poolInUse, prometheus.GaugeValue, float64(p.InUse))
		ch <- prometheus.MustNewConstMetric(c.poolOpen, prometheus.GaugeValue, float64(p.OpenConnections))
		ch <- prometheus.MustNewConstMetric(c.poolWaits, prometheus.CounterValue, float64(p.WaitCount))
		ch <- prometheus.MustNewConstMetric(c.poolWaitSeconds, prometheus.CounterValue, p.WaitDuration.Seconds())
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	st, err := c.s.opts.Source.Stats(ctx)
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	if err != nil {
		c.s.readErrors.Add(1)
		c.s.log.Warn("metrics: store read failed", "error", err)
	}
	ch <- prometheus.MustNewConstMetric(c.readErrors, prometheus.CounterValue, float64(c.s.readErrors.Load()))
	if err != nil {
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	for _, status := range taskStatuses {
		gauge(c.tasks, st.Tasks[status], string(status))
	}
	gauge(c.runningPlugins, st.Tasks[store.StatusRunning]+st.Tasks[store.StatusWaitingApproval])
	gauge(c.stepsRunning, st.Attempts[store.AttemptKey{Status: store.AttemptRunning}])
	for _, status := range finishedAttempts {
		for _, outcome := range outcomes {
			name := outcome
			if name == "" {
				name = "none"
			}
			ch <- prometheus.MustNewConstMetric(c.steps, prometheus.CounterValue,
				float64(st.Attempts[store.AttemptKey{Status: status, Outcome: outcome}]), string(status), name)
		}
	}
	for _, kind := range effectKinds {
		for _, status := range effectStatuses {
			gauge(c.effects, st.Effects[store.EffectKey{Kind: kind, Status: status}], string(kind), string(status))
		}
	}
	for _, k := range store.BudgetKinds() {
		gauge(c.budgets, st.BudgetExhausted[k], k.String())
	}
	gauge(c.approvals, st.PendingApprovals)
}

// Instruments count what the store does not keep, as it happens. It
// implements host.Observer; its methods never block. Create it before the
// host (which reports to it) and hand it to New.
type Instruments struct {
	pluginStarts  *prometheus.CounterVec
	pluginCrashes *prometheus.CounterVec
	stepDuration  *prometheus.HistogramVec
	storeCommit   prometheus.Histogram
	runsLost      prometheus.Counter
	storeRetries  *prometheus.CounterVec
	storeFenced   prometheus.Counter
	fleetAges     *prometheus.GaugeVec
	heartbeatAge  prometheus.GaugeFunc
	sweeps        prometheus.Counter
	modelTokens   *prometheus.CounterVec
	modelCall     prometheus.Histogram
	selfFenced    prometheus.Counter
	listenBreaks  prometheus.Counter
	// lastBeat is the unix nanoseconds of this host's last heartbeat that
	// reached the store; 0 before the first.
	lastBeat atomic.Int64
}

// NewInstruments returns zeroed Instruments.
func NewInstruments() *Instruments {
	i := &Instruments{
		pluginStarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskhost_plugin_starts_total",
			Help: "Executor plugin processes started (one per run of a task) since the daemon started, by executor."}, []string{"executor"}),
		pluginCrashes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskhost_plugin_crashes_total",
			Help: "Executor plugin processes that died during a step since the daemon started, by executor and reason."}, []string{"executor", "reason"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskhost_step_duration_seconds",
			Help:    "Wall time of step attempts (approval waits included) since the daemon started, by executor and attempt status.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}}, []string{"executor", "status"}),
		storeCommit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskhost_store_commit_seconds",
			Help:    "Latency of the store's write-transaction commits since the daemon started.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5}}),
		runsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskhost_runs_lost_total",
			Help: "Tasks this host found running with no live run of its own and interrupted (run_lost) since the daemon started."}),
		storeRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskhost_store_retries_total",
			Help: "Write transactions run again after losing a race since the daemon started, by SQLSTATE (40P01 deadlock, 40001 serialization failure, 25P03 idle session ended)."}, []string{"sqlstate"}),
		storeFenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskhost_store_fenced_writes_total",
			Help: "Writes the store refused because their run was over (ErrFenced: a newer run holds the task) since the daemon started."}),
		fleetAges: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskhost_fleet_host_heartbeat_age_seconds",
			Help: "Age of each fleet host's last heartbeat, as this host last read the hosts table (every heartbeat interval)."}, []string{"host"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskhost_model_tokens_total",
			Help: "Tokens of the model calls that returned a reply since the daemon started, as the endpoint reported them, by kind (prompt, completion)."}, []string{"kind"}),
		modelCall: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskhost_model_call_seconds",
			Help:    "Duration of the model calls that returned a reply (retries included) since the daemon started.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}}),
		sweeps: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskhost_fleet_sweeps_total",
			Help: "Runs of lost hosts this host took over (interrupted, host_lost) since the daemon started."}),
		selfFenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskhost_fleet_self_fenced_total",
			Help: "Times this host stopped its own runs because it could not heartbeat for most of its lease."}),
		listenBreaks: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskhost_fleet_listen_reconnects_total",
			Help: "Times the fleet notification connection (PostgreSQL LISTEN) broke and was made again since the daemon started."}),
	}
	i.heartbeatAge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskhost_host_heartbeat_age_seconds",
		Help: "Seconds since this host's last heartbeat reached the store; -1 before the first (and on a host outside a fleet)."},
		func() float64 {
			ns := i.lastBeat.Load()
			if ns == 0 {
				return -1
			}
			return time.Since(time.Unix(0, ns)).Seconds()
		})
	return i
}

// PluginStarted counts a plugin start.
func (i *Instruments) PluginStarted(executor string) { i.pluginStarts.WithLabelValues(executor).Inc() }

// PluginCrashed counts a plugin crash.
func (i *Instruments) PluginCrashed(executor, reason string) {
	i.pluginCrashes.WithLabelValues(executor, reason).Inc()
}

// StepFinished observes a step attempt's duration.
func (i *Instruments) StepFinished(executor, status string, d time.Duration) {
	i.stepDuration.WithLabelValues(executor, status).Observe(d.Seconds())
}

// StoreCommitted observes a commit's latency.
func (i *Instruments) StoreCommitted(d time.Duration) { i.storeCommit.Observe(d.Seconds()) }

// RunLost counts a task the liveness check interrupted.
func (i *Instruments) RunLost() { i.runsLost.Inc() }

// StoreRetried counts a retried write transaction by SQLSTATE.
func (i *Instruments) StoreRetried(sqlstate string) { i.storeRetries.WithLabelValues(sqlstate).Inc() }

// StoreFenced counts a write refused as fenced.
func (i *Instruments) StoreFenced() { i.storeFenced.Inc() }

// HeartbeatSent records this host's last heartbeat.
func (i *Instruments) HeartbeatSent(at time.Time) { i.lastBeat.Store(at.UnixNano()) }

// FleetHeartbeats replaces the fleet's heartbeat ages with ages: a host
// gone from the table leaves the series.
func (i *Instruments) FleetHeartbeats(ages map[string]time.Duration) {
	i.fleetAges.Reset()
	for h, d := range ages {
		i.fleetAges.WithLabelValues(h).Set(d.Seconds())
	}
}

// RunsSwept counts runs taken over from lost hosts.
func (i *Instruments) RunsSwept(n int) { i.sweeps.Add(float64(n)) }

// SelfFenced counts a self-fencing.
func (i *Instruments) SelfFenced() { i.selfFenced.Inc() }

// ModelCalled counts a model call's tokens and duration.
func (i *Instruments) ModelCalled(promptTokens, completionTokens int64, d time.Duration) {
	i.modelTokens.WithLabelValues("prompt").Add(float64(max(promptTokens, 0)))
	i.modelTokens.WithLabelValues("completion").Add(float64(max(completionTokens, 0)))
	i.modelCall.Observe(d.Seconds())
}

// ListenReconnected counts a broken notification connection.
func (i *Instruments) ListenReconnected() { i.listenBreaks.Inc() }

func (i *Instruments) collectors() []prometheus.Collector {
	return []prometheus.Collector{i.pluginStarts, i.pluginCrashes, i.stepDuration, i.storeCommit, i.runsLost,
		i.storeRetries, i.storeFenced, i.fleetAges, i.heartbeatAge, i.sweeps, i.selfFenced, i.listenBreaks,
		i.modelTokens, i.modelCall}
}

func boolFloat(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

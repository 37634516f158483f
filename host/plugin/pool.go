package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskhost/taskhost/host/tools"
)

// The pool of pre-started plugin processes.
//
// A plugin start (trampoline, confinement, exec, go-plugin handshake) costs
// tens of milliseconds; for a one-step task that is most of its life. So a
// Registry keeps, per kind, up to PluginSpec.Prestart processes started
// ahead of need through the very launch a task's own start uses — same
// uid of the pool (one per process, held while it waits), same
// confinement, same handshake — each serving no one until a task's Launch
// takes it. A taken process serves that one task and is stopped with its
// run like any other: it is never put back. Nothing of a plugin's
// confinement depends on the task (its Landlock rules name system paths,
// its binary, its own socket and private dirs, the kind's read_write paths
// and, for machinespirit, its own copy of the seed cache; the task's
// workspace is reached only through host tools), so a pooled process is
// confined exactly as one started for the task. What does depend on the
// task is bound at the take: the host services it is served (boundServices)
// and the task and run its log lines carry.
//
// A pooled process is handed out only if it was started from the binary the
// kind's current verdict is about: the verdict's generation (bumped by every
// Register, re-check and Reload) must be the one it was started under, and
// the binary's stat stamp must still be the one it had before and after the
// start (a pinned binary's SHA-256 was checked on the very fd exec'd). A
// stale or dead one is stopped and never used; the task then starts one of
// its own, whose start refuses a pin mismatch as it always did.

// MaxPrestart bounds the pooled processes of one kind.
const MaxPrestart = 16

// poolFillers bounds the pooled starts in flight at once, every kind
// together: a refill must not take the CPU the running tasks need.
const poolFillers = 2

// poolPing bounds the round trip a taken process must answer before it is
// handed out: one that died a moment ago, not yet reaped, is caught here and
// not in the task's first call.
const poolPing = 2 * time.Second

// poolDeathLimit: after this many pooled processes of a kind in a row died
// while idle, a death no longer starts a replacement at once (the next take
// still does): a plugin that exits whenever it is idle must not be
// restarted in a loop.
const poolDeathLimit = 3

// PoolStatus is what a kind's pool holds and has done.
type PoolStatus struct {
	Size int   // Prestart: the processes it keeps ready
	Idle int   // ready now
	PIDs []int // of the ready processes
	// Served counts launches served by a pooled process; Cold, launches
	// that started a process of their own while the pool was on (empty,
	// or only stale or dead processes in it).
	Served, Cold uint64
	// Started counts pooled processes started; Stale, those stopped unused
	// because the kind's binary or verdict changed (or the host closed);
	// DiedIdle, those that exited while they waited.
	Started, Stale, DiedIdle uint64
}

type pooledProc struct {
	ec    *executorClient
	svc   *boundServices
	gen   uint64
	stamp binStamp
	// left is closed once the process leaves the pool, taken or
	// discarded, by whoever removed it (under procPool.mu).
	left chan struct{}
}

type procPool struct {
	r   *Registry
	sem chan struct{}
	wg  sync.WaitGroup // fills and stops in flight

	mu      sync.Mutex
	closed  bool
	idle    map[string][]*pooledProc
	filling map[string]int
	deaths  map[string]int // pooled processes in a row that died idle
	stats   map[string]*PoolStatus
}

func newProcPool(r *Registry) *procPool {
	return &procPool{r: r, sem: make(chan struct{}, poolFillers),
		idle: map[string][]*pooledProc{}, filling: map[string]int{}, deaths: map[string]int{}, stats: map[string]*PoolStatus{}}
}

// statsLocked is kind's counters. Called with mu held.
func (p *procPool) statsLocked(kind string) *PoolStatus {
	s := p.stats[kind]
	if s == nil {
		s = &PoolStatus{}
		p.stats[kind] = s
	}
	return s
}

// poolSource is what a pooled process of kind must be started from now:
// its spec, the generation and stamp of its verdict; ok is false when the
// kind is not available (or not pooled).
func (r *Registry) poolSource(kind string) (spec PluginSpec, gen uint64, stamp binStamp, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	spec, ok = r.specs[kind]
	_, avail := r.descs[kind]
	stamp, stamped := r.stamps[kind]
	return spec, r.gens[kind], stamp, ok && avail && stamped && spec.Prestart > 0
}

// take hands out a ready process of kind, bound to services and labelled
// with ctx's task and run, or nil: the caller then starts one itself. Every
// take starts the refill.
func (p *procPool) take(ctx context.Context, kind string, services Services) *executorClient {
	spec, gen, _, ok := p.r.poolSource(kind)
	if !ok {
		p.refresh()
		return nil
	}
	defer p.fill(kind)
	for {
		p.mu.Lock()
		var pp *pooledProc
		if q := p.idle[kind]; len(q) > 0 {
			pp, p.idle[kind] = q[0], q[1:]
			close(pp.left)
		} else {
			p.statsLocked(kind).Cold++
		}
		p.mu.Unlock()
		if pp == nil {
			return nil
		}
		if why := p.unfit(pp, spec, gen); why != "" {
			p.discard(kind, pp, why)
			if why == staleBinary {
				// Every process still waiting was started from it too.
				p.drain(kind)
			}
			continue
		}
		pp.svc.bind(services)
		pp.ec.log.label(kind, launchLabelsFrom(ctx))
		// Its uid, once back, may be one the pool waits for.
		pp.ec.afterStop = func() { p.fill(kind) }
		p.mu.Lock()
		p.statsLocked(kind).Served++
		p.deaths[kind] = 0
		p.mu.Unlock()
		return pp.ec
	}
}

const staleBinary = "its binary changed since it started"

// unfit says why pp must not serve a task of the kind as it is now ("":
// it may).
func (p *procPool) unfit(pp *pooledProc, spec PluginSpec, gen uint64) string {
	if pp.gen != gen {
		return "the executor was reloaded or re-checked since it started"
	}
	if st, err := specStamp(spec); err != nil || st != pp.stamp {
		return staleBinary
	}
	select {
	case <-pp.ec.Exited():
		return "it exited while idle"
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), poolPing)
	defer cancel()
	if _, err := pp.ec.Describe(ctx); err != nil {
		return "it did not answer: " + err.Error()
	}
	return ""
}

// discard stops pp, which is out of the pool, in the background.
func (p *procPool) discard(kind string, pp *pooledProc, why string) {
	p.mu.Lock()
	if why == "it exited while idle" {
		p.statsLocked(kind).DiedIdle++
	} else {
		p.statsLocked(kind).Stale++
	}
	p.wg.Add(1)
	p.mu.Unlock()
	p.r.opts.Logger.Info("pooled plugin process discarded, never used", "kind", kind, "pid", pp.ec.proc.pid, "why", why)
	go func() {
		defer p.wg.Done()
		pp.ec.Stop()
	}()
}

// drain discards every ready process of kind.
func (p *procPool) drain(kind string) {
	p.mu.Lock()
	q := p.idle[kind]
	delete(p.idle, kind)
	for _, pp := range q {
		close(pp.left)
	}
	p.mu.Unlock()
	for _, pp := range q {
		p.discard(kind, pp, staleBinary)
	}
}

// refresh discards every ready process whose kind's verdict changed since
// it started (or is gone), then fills every kind's pool again. The
// Registry calls it after each verdict change.
func (p *procPool) refresh() {
	p.r.mu.Lock()
	gens := make(map[string]uint64, len(p.r.gens))
	var kinds []string
	for k, g := range p.r.gens {
		if _, ok := p.r.specs[k]; ok {
			gens[k] = g
		}
	}
	for k := range p.r.specs {
		kinds = append(kinds, k)
	}
	p.r.mu.Unlock()
	type gone struct {
		kind string
		pp   *pooledProc
	}
	var stale []gone
	p.mu.Lock()
	for kind, q := range p.idle {
		keep := q[:0:0]
		for _, pp := range q {
			if g, ok := gens[kind]; ok && g == pp.gen {
				keep = append(keep, pp)
				continue
			}
			close(pp.left)
			stale = append(stale, gone{kind, pp})
		}
		p.idle[kind] = keep
	}
	p.mu.Unlock()
	for _, s := range stale {
		p.discard(s.kind, s.pp, "the executor was reloaded or re-checked since it started")
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		p.fill(k)
	}
}

// fill starts, in the background, the processes kind's pool lacks.
func (p *procPool) fill(kind string) {
	spec, gen, stamp, ok := p.r.poolSource(kind)
	if !ok {
		return
	}
	p.mu.Lock()
	need := min(spec.Prestart, MaxPrestart) - len(p.idle[kind]) - p.filling[kind]
	if p.closed || need <= 0 {
		p.mu.Unlock()
		return
	}
	p.filling[kind] += need
	p.wg.Add(need)
	p.mu.Unlock()
	for range need {
		go p.start(kind, spec, gen, stamp)
	}
}

// errPoolSkip: a pooled start was not made (the pool is closed, or the
// binary is not the one its verdict is about); nothing to report.
var errPoolSkip = errors.New("pooled start skipped")

// errPoolNoUID: a pooled start was not made because only the reserved uids
// were free. A uid that comes back while the start was deciding so finds
// the fill it triggers counting this start as under way: start tries again.
var errPoolNoUID = fmt.Errorf("%w: only the reserved uids are free", errPoolSkip)

func (p *procPool) start(kind string, spec PluginSpec, gen uint64, stamp binStamp) {
	defer p.wg.Done()
	p.sem <- struct{}{}
	pp, err := p.launch(spec, gen, stamp)
	<-p.sem
	p.mu.Lock()
	p.filling[kind]--
	// r.mu inside p.mu (never the other way round): a verdict change
	// after this read is followed by a refresh that finds pp.
	_, curGen, _, ok := p.r.poolSource(kind)
	keep := err == nil && !p.closed && ok && curGen == gen
	if keep {
		p.idle[kind] = append(p.idle[kind], pp)
		p.statsLocked(kind).Started++
	}
	p.mu.Unlock()
	switch {
	case keep:
		go p.watch(kind, pp)
	case err == nil:
		pp.ec.Stop()
	case errors.Is(err, errPoolNoUID):
		if !p.uidsShort(spec) {
			p.fill(kind)
		}
	case !errors.Is(err, errPoolSkip):
		p.r.opts.Logger.Warn("pooled plugin process not started; tasks start their own", "kind", kind, "error", err)
	}
}

// launch starts one pooled process of spec through the launch every task's
// own start uses.
func (p *procPool) launch(spec PluginSpec, gen uint64, stamp binStamp) (*pooledProc, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, errPoolSkip
	}
	opts := p.r.opts
	// A uid held by a waiting process is one shell.run cannot have: the
	// pool leaves UIDReserve of them free. This is the cheap look; the
	// uid is taken (takeUID) only if the reserve is still free then.
	if p.uidsShort(spec) {
		return nil, errPoolNoUID
	}
	opts.pooled = true
	// The stamp before and after the start brackets the open of the binary
	// inside launch: equal, the file exec'd is the one the verdict is about.
	if st, err := specStamp(spec); err != nil || st != stamp {
		return nil, errPoolSkip
	}
	svc := &boundServices{}
	ec, err := launch(context.Background(), p.r.forker, spec, opts, p.r.support, NewServicesServer(svc))
	if err != nil {
		return nil, err
	}
	if st, err := specStamp(spec); err != nil || st != stamp {
		ec.Stop()
		return nil, errPoolSkip
	}
	return &pooledProc{ec: ec, svc: svc, gen: gen, stamp: stamp, left: make(chan struct{})}, nil
}

// uidsShort reports whether a pooled process of spec would take one of the
// uids reserved for running tasks.
func (p *procPool) uidsShort(spec PluginSpec) bool {
	opts := p.r.opts
	return spec.Confine.OwnUID && spec.Confine.User == "" && opts.UIDs != nil && opts.UIDs.Free() <= opts.UIDReserve
}

// watch discards pp if it exits while it waits, and starts a replacement.
func (p *procPool) watch(kind string, pp *pooledProc) {
	select {
	case <-pp.left:
		return
	case <-pp.ec.Exited():
	}
	p.mu.Lock()
	q := p.idle[kind]
	i := slices.Index(q, pp)
	if i < 0 {
		p.mu.Unlock()
		return // taken or drained meanwhile
	}
	p.idle[kind] = slices.Delete(q, i, i+1)
	close(pp.left)
	p.deaths[kind]++
	again := p.deaths[kind] < poolDeathLimit
	p.mu.Unlock()
	p.r.opts.Logger.Warn("pooled plugin process exited while idle; it served no task", "kind", kind, "pid", pp.ec.proc.pid,
		"status", pp.ec.proc.status.String(), "stderr", pp.ec.StderrTail())
	p.discard(kind, pp, "it exited while idle")
	if again {
		p.fill(kind)
	}
}

// close stops every ready process and waits for the starts and stops in
// flight; nothing is pooled afterwards.
func (p *procPool) close() {
	p.mu.Lock()
	p.closed = true
	var all []*pooledProc
	for kind, q := range p.idle {
		for _, pp := range q {
			close(pp.left)
			p.statsLocked(kind).Stale++
		}
		all = append(all, q...)
	}
	p.idle = map[string][]*pooledProc{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, pp := range all {
		wg.Go(pp.ec.Stop)
	}
	wg.Wait()
	p.wg.Wait()
}

// status is kind's PoolStatus.
func (p *procPool) status(kind string, size int) PoolStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := *p.statsLocked(kind)
	s.Size = size
	for _, pp := range p.idle[kind] {
		s.PIDs = append(s.PIDs, pp.ec.proc.pid)
	}
	s.Idle = len(s.PIDs)
	return s
}

// PoolStatus is what kind's pool of pre-started processes holds and has
// done.
func (r *Registry) PoolStatus(kind string) PoolStatus {
	r.mu.Lock()
	size := r.specs[kind].Prestart
	r.mu.Unlock()
	return r.pool.status(kind, size)
}

// boundServices is the Services of a pooled process: nothing until a take
// binds the task's (every call is refused with ErrNotConfigured before).
type boundServices struct {
	s atomic.Pointer[Services]
}

func (b *boundServices) bind(s Services) { b.s.Store(&s) }

func (b *boundServices) get() Services {
	if s := b.s.Load(); s != nil {
		return *s
	}
	return NoServices{}
}

func (b *boundServices) Progress(ctx context.Context, turnToken, note string) error {
	return b.get().Progress(ctx, turnToken, note)
}
func (b *boundServices) ListTools(ctx context.Context, turnToken string) ([]tools.Spec, error) {
	return b.get().ListTools(ctx, turnToken)
}
func (b *boundServices) CallModel(ctx context.Context, call ModelCall) (ModelAnswer, error) {
	return b.get().CallModel(ctx, call)
}
func (b *boundServices) CallTool(ctx context.Context, call ToolCall) (ToolAnswer, error) {
	return b.get().CallTool(ctx, call)
}
func (b *boundServices) RequestApproval(ctx context.Context, turnToken, prompt string) error {
	return b.get().RequestApproval(ctx, turnToken, prompt)
}
func (b *boundServices) RequestInput(ctx context.Context, turnToken, question string) ([]byte, error) {
	return b.get().RequestInput(ctx, turnToken, question)
}
func (b *boundServices) AbandonEffect(ctx context.Context, turnToken string, attempt, seq int64) error {
	return b.get().AbandonEffect(ctx, turnToken, attempt, seq)
}

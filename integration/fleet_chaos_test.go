package integration

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver the invariants are read through

	"github.com/taskhost/taskhost/internal/testpg"
	"github.com/taskhost/taskhost/internal/testwait"
)

// TestFleetChaos is the chaos suite across a fleet: three real `taskhost
// serve` hosts on one PostgreSQL database, a seeded randomized workload of
// testexec tasks, and per round one fault — a host SIGKILLed mid-step, a
// host SIGSTOPped past its lease (its task taken over elsewhere) and then
// SIGCONTed, a cancel through a host that does not own the task, a killed
// host restarted, every backend of the database terminated — with interrupted tasks resumed through a random live
// host. After every round the store's promises are read from the database
// itself; at the end every host is brought back, every interrupted task is
// resumed until it completes, and the number of violated invariants must
// be 0. TASKHOST_FLEET_CHAOS_ROUNDS sets the rounds (default 6),
// TASKHOST_FLEET_CHAOS_SEED replays a run's choices (which host gets a
// create, which fault, how long to wait); which host holds a step when the
// fault lands still depends on timing.
//
// Serial: its orphan check counts every executor of this binary whose host is
// gone, and its leases are timed.
func TestFleetChaos(t *testing.T) {
	dsn := testpg.DSN(t)
	rounds := envInt(t, "TASKHOST_FLEET_CHAOS_ROUNDS", 6)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TASKHOST_FLEET_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TASKHOST_FLEET_CHAOS_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("fleet chaos seed %d (replay: TASKHOST_FLEET_CHAOS_SEED=%d TASKHOST_FLEET_CHAOS_ROUNDS=%d)", seed, seed, rounds)
	env := dsnEnv(t, dsn)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	c := &fleetChaos{
		t: t, rng: mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), db: db, work: testwait.ShortTempDir(t),
		seen: map[string]chaosRow{}, frozen: map[runKey]string{}, cancelled: map[string]bool{}, lost: map[string]bool{}, faults: map[string]int{},
	}
	key := make([]byte, 32)
	rand.Read(key) //nolint:errcheck // never fails
	for _, id := range []string{"host-a", "host-b", "host-c"} {
		h := &fleetHost{id: id, data: testwait.ShortTempDir(t)}
		if err := os.WriteFile(filepath.Join(h.data, "host.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		// max_concurrent leaves room for the whole workload on one host:
		// a resume after a takeover must not be refused as busy.
		h.cfg = writeConfig(t, testwait.ShortTempDir(t), fmt.Sprintf("[tasks]\nmax_concurrent = 16\n\n[executors.testexec]\npath = %q\nread_write = [%q]\n\n"+
			"[store]\ndriver = \"postgres\"\ndsn_env = %q\n\n[fleet]\nhost_id = %q\n%s",
			filepath.Join(binDir, "taskhost-executor-testexec"), c.work, env, id, fleetTimings))
		h.start(t)
		c.hosts = append(c.hosts, h)
	}
	t.Cleanup(func() {
		for _, h := range c.hosts {
			if h.state == hostStopped {
				h.d.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // best effort for the clean-up
			}
		}
	})
	for i := range rounds {
		c.round(i)
		c.check(i)
	}
	c.drain()
	c.report(seed)
}

// The fleet's timings (fleetTimings): a host silent for chaosLease loses
// its runs; a live host sweeps every chaosHeartbeat.
const (
	chaosLease     = 3 * time.Second
	chaosHeartbeat = time.Second
	// chaosSettle bounds how long a lost host's runs may stay leased to
	// it: the lease, then a sweep by a live host, with slack for a loaded
	// machine.
	chaosSettle = chaosLease + 3*chaosHeartbeat + 4*time.Second
)

type hostState int

const (
	hostUp hostState = iota
	hostKilled
	hostStopped
)

// fleetHost is one host of the fleet: its data dir and config outlive its
// processes, so a killed host restarts as itself.
type fleetHost struct {
	id        string
	data, cfg string
	d         *daemon
	state     hostState
}

func (h *fleetHost) start(t *testing.T) {
	t.Helper()
	h.d = startDaemon(t, h.data, h.cfg)
	h.state = hostUp
}

// chaosRow is a task's row as of the last check.
type chaosRow struct {
	status, reason, leaseHost string
	runID                     int64
	used, limit               [4]int64 // steps, tool calls, model calls, depth
}

var budgetNames = [4]string{"steps", "tool_calls", "model_calls", "depth"}

type runKey struct {
	task string
	run  int64
}

type fleetChaos struct {
	t     *testing.T
	rng   *mrand.Rand
	db    *sql.DB
	work  string
	hosts []*fleetHost
	seen  map[string]chaosRow
	// frozen holds the attempts of a run, recorded once a newer run of
	// its task exists: from then on the old run may write nothing.
	frozen     map[runKey]string
	cancelled  map[string]bool // tasks this test cancelled
	lost       map[string]bool // tasks seen interrupted as host_lost
	created    int
	violations int
	faults     map[string]int
}

// violate records a broken invariant and goes on, so a run reports them all.
func (c *fleetChaos) violate(round int, format string, args ...any) {
	c.t.Helper()
	c.violations++
	c.t.Errorf("round %d: "+format, append([]any{round}, args...)...)
}

func (c *fleetChaos) up() []*fleetHost {
	var up []*fleetHost
	for _, h := range c.hosts {
		if h.state == hostUp {
			up = append(up, h)
		}
	}
	return up
}

func (c *fleetChaos) pick(hs []*fleetHost) *fleetHost { return hs[c.rng.IntN(len(hs))] }

func (c *fleetChaos) host(id string) *fleetHost {
	for _, h := range c.hosts {
		if h.id == id {
			return h
		}
	}
	return nil
}

// round creates a task, perhaps resumes an interrupted one, lets the steps
// get going for a random while and injects one fault.
func (c *fleetChaos) round(i int) {
	t := c.t
	for range 1 + c.rng.IntN(2) {
		c.create(i, c.pick(c.up()))
	}
	if ids := c.withStatus("interrupted"); len(ids) > 0 && c.rng.IntN(2) == 0 {
		c.resume(i, ids[c.rng.IntN(len(ids))], c.pick(c.up()))
	}
	time.Sleep(time.Duration(200+c.rng.IntN(1300)) * time.Millisecond) // the fault's moment, not a synchronisation
	faults := []string{"none", "kill-host", "kill-host", "stop-host", "stop-host", "cancel-remote", "cancel-remote", "restart", "terminate-backends"}
	fault := faults[c.rng.IntN(len(faults))]
	if i == 1 {
		// Every run, however short, has every backend terminated once,
		// with steps in flight (issue 21's ghost runs and refusals).
		fault = "terminate-backends"
	}
	up := c.up()
	switch fault {
	case "kill-host", "stop-host":
		if len(up) < 2 {
			// One host must stay up to sweep: bring a killed one back
			// instead.
			fault = "restart"
			c.restart()
			break
		}
		// Prefer a host with a step in flight: that is the fault's point.
		victim := c.pick(up)
		if owners := c.owners(); len(owners) > 0 {
			victim = c.host(owners[c.rng.IntN(len(owners))])
		}
		if fault == "kill-host" {
			victim.d.kill(t)
			victim.state = hostKilled
			held := c.leased(victim.id)
			t.Logf("round %d: killed %s holding %v", i, victim.id, held)
			c.awaitLost(i, victim.id, held, time.Now())
			break
		}
		c.pause(i, victim)
	case "cancel-remote":
		fault = c.cancelRemote(i)
	case "terminate-backends":
		c.terminateBackends(i)
	case "restart":
		if !c.restart() {
			fault = "none (no host down)"
		}
	}
	c.faults[fault]++
}

// terminateBackends ends every session of the fleet's database but the
// test's own (pg_terminate_backend), as a server restart or a failover
// does: every host's in-flight transactions fail, its pool reconnects, and
// no run may be lost or written twice for it.
func (c *fleetChaos) terminateBackends(i int) {
	var n int
	if err := c.db.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		c.t.Fatalf("round %d: terminate the backends: %v", i, err)
	}
	c.t.Logf("round %d: terminated %d backends", i, n)
}

// restart starts a killed host again, as itself; false when none is down.
func (c *fleetChaos) restart() bool {
	var killed []*fleetHost
	for _, h := range c.hosts {
		if h.state == hostKilled {
			killed = append(killed, h)
		}
	}
	if len(killed) == 0 {
		return false
	}
	c.pick(killed).start(c.t)
	return true
}

// owners lists the live hosts holding a running task's lease.
func (c *fleetChaos) owners() []string {
	var owners []string
	for _, h := range c.up() {
		var n int
		if err := c.db.QueryRow(`SELECT count(*) FROM tasks WHERE status = 'running' AND lease_host = $1`, h.id).Scan(&n); err != nil {
			c.t.Fatal(err)
		}
		if n > 0 {
			owners = append(owners, h.id)
		}
	}
	return owners
}

// create creates a task through h; a busy host is no violation.
func (c *fleetChaos) create(i int, h *fleetHost) {
	steps := 2 + c.rng.IntN(5)
	spec := writeSpec(c.t, c.work, map[string]any{"goal": fmt.Sprintf("fleet chaos %d", i),
		"testexec": map[string]any{"steps": steps, "sleep_ms": 150 + c.rng.IntN(900)}})
	out, errOut, code := h.d.cli(c.t, "task", "create", "--executor", "testexec", "--spec-file", spec,
		"--max-steps", strconv.Itoa(steps+30), "--json")
	switch code {
	case 0:
		c.created++
	case 4:
		c.faults["create refused (busy)"]++
	default:
		c.violate(i, "create through %s: exit %d %s%s", h.id, code, out, errOut)
	}
}

// resume resumes an interrupted task through h. Exit 4 is a race the
// suite makes itself (the task was resumed or cancelled meanwhile). Exit
// 5 is the store unavailable, retryable by contract: a terminated backend
// can cut a write's connection where the store may not run it again (its
// COMMIT sent, the outcome unknown), and the client tries again, here up
// to 5 times.
func (c *fleetChaos) resume(i int, id string, h *fleetHost) {
	out, errOut, code := h.d.cli(c.t, "task", "resume", id, "--json")
	for try := 0; code == 5 && try < 5; try++ {
		c.faults["resume unavailable, tried again"]++
		time.Sleep(200 * time.Millisecond) // a client's back-off, not a wait for an event
		out, errOut, code = h.d.cli(c.t, "task", "resume", id, "--json")
	}
	switch code {
	case 0:
		c.faults["resumes"]++
	case 4:
		c.faults["resume refused (conflict)"]++
	default:
		c.violate(i, "resume %s through %s: exit %d %s%s", id, h.id, code, out, errOut)
	}
}

// pause SIGSTOPs h past its lease: a live host must mark its runs host_lost
// within the bound; one of them is resumed elsewhere before h goes on, so
// its late writes meet a newer run (fencing).
func (c *fleetChaos) pause(i int, h *fleetHost) {
	t := c.t
	if err := h.d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	h.state = hostStopped
	stopped := time.Now()
	// Read after the stop: the stopped host can no longer end what it holds.
	held := c.leased(h.id)
	t.Logf("round %d: stopped %s holding %v", i, h.id, held)
	c.awaitLost(i, h.id, held, stopped)
	if len(held) > 0 {
		c.resume(i, held[c.rng.IntN(len(held))], c.pick(c.up()))
	}
	if err := h.d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.state = hostUp
}

// leased lists the live tasks leased to host.
func (c *fleetChaos) leased(host string) []string {
	rows, err := c.db.Query(`SELECT id FROM tasks WHERE status IN ('running', 'waiting_approval') AND lease_host = $1 ORDER BY seq`, host)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			c.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return ids
}

// awaitLost waits for a live host to sweep the tasks host held when it
// went silent at since: each must become interrupted (host_lost) within
// the lease and a sweep — and not before the lease, counted from the
// host's last heartbeat, ran out. A write the host stamped before since
// may still land after the read of held (it was in flight): that one is
// the host's own, not a violation.
func (c *fleetChaos) awaitLost(i int, host string, held []string, since time.Time) {
	var beat int64
	if err := c.db.QueryRow(`SELECT heartbeat_ns FROM hosts WHERE id = $1`, host).Scan(&beat); err != nil {
		c.t.Fatal(err)
	}
	deadline := since.Add(chaosSettle)
	for _, id := range held {
		for {
			var status, reason string
			var updated int64
			if err := c.db.QueryRow(`SELECT status, reason, updated_ns FROM tasks WHERE id = $1`, id).Scan(&status, &reason, &updated); err != nil {
				c.t.Fatal(err)
			}
			if status != "running" && status != "waiting_approval" {
				switch {
				case updated < since.UnixNano():
					c.faults["in-flight write before the fault"]++
				case status != "interrupted" || reason != "host_lost":
					c.violate(i, "task %s of silent host %s ended %s (%s), want interrupted (host_lost)", id, host, status, reason)
				case updated < beat+chaosLease.Nanoseconds():
					c.violate(i, "task %s of host %s taken over %s after its last heartbeat, before its lease of %s ran out",
						id, host, time.Duration(updated-beat), chaosLease)
				default:
					c.lost[id] = true
				}
				break
			}
			if time.Now().After(deadline) {
				c.violate(i, "task %s still %s on %s, silent for %s (lease %s)", id, status, host, time.Since(since).Round(time.Millisecond), chaosLease)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// cancelRemote cancels a running task through a live host that does not
// hold its lease.
func (c *fleetChaos) cancelRemote(i int) string {
	type cand struct{ id, owner string }
	var cands []cand
	rows, err := c.db.Query(`SELECT id, lease_host FROM tasks WHERE status = 'running' ORDER BY seq`)
	if err != nil {
		c.t.Fatal(err)
	}
	for rows.Next() {
		var x cand
		if err := rows.Scan(&x.id, &x.owner); err != nil {
			c.t.Fatal(err)
		}
		cands = append(cands, x)
	}
	if err := rows.Close(); err != nil {
		c.t.Fatal(err)
	}
	if len(cands) == 0 {
		return "none (nothing running)"
	}
	x := cands[c.rng.IntN(len(cands))]
	var others []*fleetHost
	for _, h := range c.up() {
		if h.id != x.owner {
			others = append(others, h)
		}
	}
	if len(others) == 0 {
		return "none (no other host)"
	}
	via := c.pick(others)
	out, errOut, code := via.d.cli(c.t, "task", "cancel", x.id, "--json")
	switch {
	case code == 4:
		return "cancel-remote (task ended first)"
	case code != 0:
		c.violate(i, "cancel %s (on %s) through %s: exit %d %s%s", x.id, x.owner, via.id, code, out, errOut)
	case !strings.Contains(out, `"status":"cancelled"`):
		c.violate(i, "cancel %s through %s answered %s", x.id, via.id, out)
	default:
		c.cancelled[x.id] = true
	}
	return "cancel-remote"
}

func (c *fleetChaos) withStatus(status string) []string {
	var ids []string
	for id, r := range c.seen {
		if r.status == status {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // map order would break the seed's replay
	return ids
}

// check reads the store and checks the fleet's promises.
func (c *fleetChaos) check(i int) {
	// No run stays leased to a silent host once a live one had time to sweep.
	deadline := time.Now().Add(chaosSettle)
	for {
		stale := c.staleLeases()
		if len(stale) == 0 {
			break
		}
		if time.Now().After(deadline) {
			c.violate(i, "tasks still running on hosts silent for over the lease: %v", stale)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	rows := c.readTasks()
	if len(rows) > c.created {
		c.violate(i, "%d task rows after %d creates", len(rows), c.created)
	}
	for id := range c.seen {
		if _, ok := rows[id]; !ok {
			c.violate(i, "task %s was lost", id)
		}
	}
	for id, r := range rows {
		prev, had := c.seen[id]
		for k, name := range budgetNames {
			if r.used[k] > r.limit[k] {
				c.violate(i, "task %s: %s %d/%d past its limit", id, name, r.used[k], r.limit[k])
			}
			if had && r.used[k] < prev.used[k] {
				c.violate(i, "task %s: %s went backwards %d → %d", id, name, prev.used[k], r.used[k])
			}
			if had && r.limit[k] != prev.limit[k] {
				c.violate(i, "task %s: %s limit changed %d → %d", id, name, prev.limit[k], r.limit[k])
			}
		}
		if had && r.runID < prev.runID {
			c.violate(i, "task %s: run id went backwards %d → %d", id, prev.runID, r.runID)
		}
		if had && isTerminal(prev.status) && (r.status != prev.status || r.runID != prev.runID) {
			c.violate(i, "task %s left terminal %s (run %d) for %s (run %d)", id, prev.status, prev.runID, r.status, r.runID)
		}
		if r.status == "cancelled" && !c.cancelled[id] {
			c.violate(i, "task %s cancelled (%s) though nobody cancelled it", id, r.reason)
		}
		if r.status == "failed" {
			c.violate(i, "task %s failed (%s): testexec tasks with room in their budgets do not fail", id, r.reason)
		}
		if r.reason == "host_lost" {
			c.lost[id] = true
		}
		c.seen[id] = r
	}
	c.checkRuns(i, rows)
}

// checkRuns checks the fencing promise on the attempts: once a newer run
// of a task exists, the attempts of its older runs are closed, ended no
// later than the newer run's first attempt started, and never change again.
func (c *fleetChaos) checkRuns(i int, tasks map[string]chaosRow) {
	rs, err := c.db.Query(`SELECT task_id, number, run_id, status, outcome, reason, started_ns, COALESCE(ended_ns, -1) FROM attempts ORDER BY task_id, number`)
	if err != nil {
		c.t.Fatal(err)
	}
	type att struct {
		number, run, started, ended int64
		status, outcome, reason     string
	}
	byTask := map[string][]att{}
	for rs.Next() {
		var id string
		var a att
		if err := rs.Scan(&id, &a.number, &a.run, &a.status, &a.outcome, &a.reason, &a.started, &a.ended); err != nil {
			c.t.Fatal(err)
		}
		byTask[id] = append(byTask[id], a)
	}
	if err := rs.Close(); err != nil {
		c.t.Fatal(err)
	}
	for id, atts := range byTask {
		task := tasks[id]
		runs := map[int64]string{}
		firstStart := map[int64]int64{}
		lastEnd := map[int64]int64{}
		for _, a := range atts {
			if a.run > task.runID {
				c.violate(i, "task %s: attempt %d of run %d, past the task's run %d", id, a.number, a.run, task.runID)
			}
			runs[a.run] += fmt.Sprintf("%d:%s:%s:%s:%d;", a.number, a.status, a.outcome, a.reason, a.ended)
			if s, ok := firstStart[a.run]; !ok || a.started < s {
				firstStart[a.run] = a.started
			}
			lastEnd[a.run] = max(lastEnd[a.run], a.ended)
			if a.run < task.runID && a.status == "running" {
				c.violate(i, "task %s: attempt %d of run %d still running in run %d", id, a.number, a.run, task.runID)
			}
		}
		for run, fp := range runs {
			if run >= task.runID {
				continue
			}
			k := runKey{id, run}
			if old, ok := c.frozen[k]; ok && old != fp {
				c.violate(i, "task %s: run %d wrote after run %d took over:\nbefore %s\nafter  %s", id, run, task.runID, old, fp)
			}
			c.frozen[k] = fp
			for newer, start := range firstStart {
				if newer > run && lastEnd[run] > start {
					c.violate(i, "task %s: run %d's attempts ended at %d, after run %d's first attempt started at %d", id, run, lastEnd[run], newer, start)
				}
			}
		}
	}
}

// staleLeases lists the live tasks leased to a host whose heartbeat is
// older than the lease.
func (c *fleetChaos) staleLeases() []string {
	rows, err := c.db.Query(`SELECT t.id || '@' || t.lease_host FROM tasks t
		WHERE t.status IN ('running', 'waiting_approval') AND t.lease_host <> ''
			AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = t.lease_host AND h.heartbeat_ns >= $1)
		ORDER BY t.seq`, time.Now().Add(-chaosLease).UnixNano())
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			c.t.Fatal(err)
		}
		ids = append(ids, s)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return ids
}

func (c *fleetChaos) readTasks() map[string]chaosRow {
	rows, err := c.db.Query(`SELECT id, status, reason, lease_host, run_id,
		steps_used, steps_limit, tool_calls_used, tool_calls_limit, model_calls_used, model_calls_limit, depth_used, depth_limit FROM tasks`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]chaosRow{}
	for rows.Next() {
		var id string
		var r chaosRow
		if err := rows.Scan(&id, &r.status, &r.reason, &r.leaseHost, &r.runID,
			&r.used[0], &r.limit[0], &r.used[1], &r.limit[1], &r.used[2], &r.limit[2], &r.used[3], &r.limit[3]); err != nil {
			c.t.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// drain brings every host back and resumes every interrupted task, through
// a random host, until all tasks are terminal: each one nobody cancelled
// must complete.
func (c *fleetChaos) drain() {
	t := c.t
	for _, h := range c.hosts {
		if h.state == hostKilled {
			h.start(t)
		}
	}
	final := -1 // the drain's "round" in reports
	deadline := time.Now().Add(120 * time.Second)
	for {
		c.check(final)
		live := 0
		for _, id := range c.withStatus("interrupted") {
			c.resume(final, id, c.pick(c.hosts))
			live++
		}
		for _, r := range c.seen {
			if !isTerminal(r.status) && r.status != "interrupted" {
				live++
			}
		}
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			c.violate(final, "tasks not finished 120 s into the final drain: interrupted %v", c.withStatus("interrupted"))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for id, r := range c.seen {
		if r.status != "completed" && !(r.status == "cancelled" && c.cancelled[id]) {
			c.violate(final, "task %s ended %s (%s), want completed", id, r.status, r.reason)
		}
	}
	var running int
	if err := c.db.QueryRowContext(context.Background(), `SELECT count(*) FROM attempts WHERE status = 'running'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running > 0 {
		c.violate(final, "%d attempts still running after the drain", running)
	}
}

func (c *fleetChaos) report(seed uint64) {
	statuses := map[string]int{}
	for _, r := range c.seen {
		statuses[r.status]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-34s %6s\n", "fault", "count")
	keys := make([]string, 0, len(c.faults))
	for k := range c.faults {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%-34s %6d\n", k, c.faults[k])
	}
	// How much the run exercised: takeovers, runs the fencing check
	// covered, runs a host itself found fenced after a pause, hosts that
	// fenced themselves (a pause past the lease, seen on waking).
	fenced, selfFenced := 0, 0
	for _, h := range c.hosts {
		fenced += strings.Count(h.d.logText(), "lease was lost") + strings.Count(h.d.logText(), "lost its lease")
		selfFenced += strings.Count(h.d.logText(), "host fenced itself")
	}
	fmt.Fprintf(&b, "host_lost takeovers %d, older runs checked for late writes %d, runs stopped as fenced %d, self-fencings %d\n",
		len(c.lost), len(c.frozen), fenced, selfFenced)
	fmt.Fprintf(&b, "tasks: %d created, by status %v\nviolated invariants: %d (seed %d)", c.created, statuses, c.violations, seed)
	c.t.Log(b.String())
}

package executortest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/text"
)

const (
	// hostStopGrace is the host's default plugin stop grace (DESIGN §9):
	// how long a production host waits for a stopping plugin before it
	// kills it. The SDK waits as long for a cancelled Step to return.
	hostStopGrace = 2 * time.Second
	// cancelMargin is the slack on top of hostStopGrace before the cancel
	// check fails, for slow and busy test machines.
	cancelMargin = time.Second
	// sdkStepNotReturned is how the SDK reports, on the plugin's stderr
	// (which the host re-logs), a Step that did not return after its
	// context was cancelled.
	sdkStepNotReturned = "did not return after its context was cancelled"
	// slowFloor is how long a slow step (the slow scenario's first, the
	// crash scenario's second) must at least still run after the kit saw
	// it start before the kit interrupts it. The scenarios promise 2 s; a
	// step under this floor would race the kit's signal, so the check
	// would pass or fail by chance. The kit refuses it instead.
	slowFloor = 200 * time.Millisecond
	// minCrashSteps is how many steps the crash scenario must take: the
	// kill lands in step 2, and only a step after the resumed one shows the
	// task carrying on from the resumed step's checkpoint.
	minCrashSteps = 3
	// pollInterval is how often the kit looks at processes while it waits
	// for one to appear or go.
	pollInterval = 5 * time.Millisecond
)

// kit is one Run: the options, where it works, and what checks learn for
// later ones.
type kit struct {
	opts     Options
	taskhost string // the taskhost binary the hosts run
	scratch  string
	root     string // the name of Run's test, to name checks in notes
	sums     map[string]string
	desc     *description  // set by a passing describe check
	crash    *crashOutcome // set by a passing crash_resume check
	notes    map[string][]string
}

// crashOutcome is what a task of the crash scenario came to after a kill
// and a resume.
type crashOutcome struct {
	completed int // completed attempts over both runs
	result    json.RawMessage
}

// Run runs the conformance checks against opts.Binary, each as a subtest
// named after its Check constant, and logs a summary with the timings.
// It drives a real taskhost: see the package documentation.
func Run(t *testing.T, opts Options) {
	t.Helper()
	bin, err := opts.validate()
	if err != nil {
		t.Fatalf("executortest: %v", err)
	}
	scratch, err := scratchDir()
	if err != nil {
		t.Fatalf("executortest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(scratch) })
	k := &kit{opts: opts, taskhost: bin, scratch: scratch, root: t.Name(), sums: map[string]string{}, notes: map[string][]string{}}
	if opts.builtin() {
		// Hosts of a built-in kind get their own link of taskhost (see
		// newHost); links of one copy in the scratch dir are cheap.
		k.taskhost = scratch + "/taskhost"
		if err := linkOrCopy(bin, k.taskhost); err != nil {
			t.Fatalf("executortest: %v", err)
		}
	}

	checks := []struct {
		name string
		run  func(*testing.T)
	}{
		{CheckDescribe, k.checkDescribe},
		{CheckComplete, k.checkComplete},
		{CheckCancel, k.checkCancel},
		{CheckResultTooLarge, k.checkResultTooLarge},
		{CheckStepBudget, k.checkStepBudget},
		{CheckCrashResume, k.checkCrashResume},
		{CheckHostCrashResume, k.checkHostCrashResume},
		{CheckCheckpointRoundTrip, k.checkCheckpointRoundTrip},
		{CheckSchemaUpgrade, k.checkSchemaUpgrade},
		{CheckDeterminism, k.checkDeterminism},
	}
	var summary strings.Builder
	fmt.Fprintf(&summary, "executortest summary: kind %s, binary %s, taskhost %s", opts.Kind, opts.Binary, bin)
	for _, c := range checks {
		verdict, start := "SKIP", time.Now()
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				switch {
				case t.Failed():
					verdict = "FAIL"
				case t.Skipped():
					verdict = "SKIP"
				default:
					verdict = "PASS"
				}
			}()
			if reason, ok := k.opts.skipReason(c.name); ok {
				t.Skipf("skipped by Options.Skip: %s", reason)
			}
			c.run(t)
		})
		fmt.Fprintf(&summary, "\n  %-22s %s %6.2fs", c.name, verdict, time.Since(start).Seconds())
		for _, name := range slices.Sorted(maps.Keys(k.notes)) {
			if name == c.name || strings.HasPrefix(name, c.name+"/") {
				for _, n := range k.notes[name] {
					fmt.Fprintf(&summary, "\n      %s: %s", name, n)
				}
			}
		}
	}
	t.Log(summary.String())
}

// scratchDir makes the directory the kit works in. The host's plugin
// socket dir (DATA/plugins) must stay under 60 bytes, unix socket paths
// being capped at 108, so a long TMPDIR is not used. It is 0711: a root
// host's plugins run under uids of their own, which must pass through it
// to reach a built-in kind's executor dir.
func scratchDir() (string, error) {
	base := os.TempDir()
	if len(base) > 24 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "thk")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// note records a measurement for the summary and logs it.
func (k *kit) note(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Log(msg)
	name := strings.TrimPrefix(t.Name(), k.root+"/")
	k.notes[name] = append(k.notes[name], msg)
}

// context bounds one check.
func (k *kit) context(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), k.opts.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// spec returns the spec of scenario, with a goal.
func (k *kit) spec(scenario string) (map[string]any, error) {
	spec := k.opts.Spec(scenario)
	if spec == nil {
		return nil, fmt.Errorf("Options.Spec(%q) returned nil: return the task spec of this scenario, or skip the checks that need it (Options.Skip, with a reason)", scenario)
	}
	spec = maps.Clone(spec)
	if _, ok := spec["goal"]; !ok {
		spec["goal"] = "executortest: the " + scenario + " scenario"
	}
	return spec, nil
}

// ---- the checks ----

func (k *kit) checkDescribe(t *testing.T) {
	d, err := describeBinary(k.context(t), k.opts.Binary, k.opts.Interpreted)
	if err != nil {
		t.Fatalf("could not start %s as a plugin and call Describe: %v\n"+
			"The binary's main must call sdk.Serve(yourExecutor) and print nothing to stdout before it (log to stderr).", k.opts.Binary, err)
	}
	k.note(t, "%s", d)
	ok := true
	fail := func(format string, args ...any) {
		t.Helper()
		ok = false
		t.Errorf(format, args...)
	}
	if d.Kind != k.opts.Kind {
		fail("Describe().Kind is %q but Options.Kind is %q: the host registers an executor under the kind it is configured as and refuses one that describes itself otherwise. Make them the same.", d.Kind, k.opts.Kind)
	}
	if d.Version == "" {
		fail("Describe().Version is empty: set it to your executor's version, e.g. \"1.0.0\"; the host records it with every task.")
	}
	if len(d.CheckpointSchemas) == 0 {
		fail("Describe().CheckpointSchemas is empty: list every checkpoint schema Step accepts, newest first (e.g. %q); the host refuses an executor that accepts none.", k.opts.Kind+"/1")
	}
	seen := map[string]bool{}
	for _, s := range d.CheckpointSchemas {
		switch {
		case s == "" || len(s) > 64:
			fail("Describe().CheckpointSchemas holds %q: a schema is a short, non-empty name such as %q (at most 64 bytes).", s, k.opts.Kind+"/1")
		case seen[s]:
			fail("Describe().CheckpointSchemas lists %q twice.", s)
		}
		seen[s] = true
	}
	if ok {
		k.desc = &d
	}
}

func (k *kit) checkComplete(t *testing.T) {
	ctx := k.context(t)
	h := k.newHost(t, k.opts.Binary)
	s := k.mustStart(ctx, t, h, ScenarioComplete)
	code := k.mustWait(ctx, t, s)
	v := k.mustInspect(ctx, t, h, s)
	if code != exitOK || v.Task.Status != "completed" {
		t.Fatalf("the %q task ended %s (taskhost exit %d), want completed (exit 0).%s\n"+
			"Return sdk.Continue(summary, checkpoint) while work remains and sdk.Complete(summary, result, checkpoint) when it is done.",
			ScenarioComplete, v.Task, code, v.attemptLines())
	}
	n := v.completed()
	if n != len(v.Attempts) {
		t.Errorf("%d of %d attempts completed, want all of an uninterrupted task:%s", n, len(v.Attempts), v.attemptLines())
	}
	if n < 2 {
		t.Errorf("the %q task completed in %d step: make the scenario take at least 2 steps (sdk.Continue with a checkpoint first), so that the kit sees a first step without a checkpoint and a later one with the checkpoint of the step before.", ScenarioComplete, n)
	}
	for i, a := range v.Attempts {
		want := "continue"
		if i == len(v.Attempts)-1 {
			want = "complete"
		}
		if a.Outcome != want {
			t.Errorf("%s: outcome %q, want %q", a, a.Outcome, want)
		}
	}
	k.checkResult(t, ScenarioComplete, "run uninterrupted", v)
	k.note(t, "completed in %d steps, %v (taskhost start to exit)", n, time.Since(s.started).Round(time.Millisecond))
}

func (k *kit) checkCancel(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sigName(sig), func(t *testing.T) { k.cancelWith(t, sig) })
	}
}

// cancelWith stops the foreground host with sig during the slow step: the
// host cancels the step's context, and the executor must return from Step
// promptly so that its plugin can exit.
func (k *kit) cancelWith(t *testing.T, sig syscall.Signal) {
	ctx := k.context(t)
	h := k.newHost(t, k.opts.Binary)
	s := k.mustStart(ctx, t, h, ScenarioSlow)
	started, err := s.waitLine(ctx, "the first step to start", isEvent("step.started"))
	if err != nil {
		t.Fatalf("%v\nThe %q scenario's first step must take at least 2 s.", err, ScenarioSlow)
	}
	k.mustStayBusy(ctx, t, s, started, ScenarioSlow, "first step")
	pid := k.mustFindPlugin(ctx, t, h, s, ScenarioSlow)
	sent := time.Now()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal taskhost: %v", err)
	}
	pluginGone, err := waitGone(ctx, pid, kitStopGraceSeconds*time.Second+5*time.Second)
	if err != nil {
		t.Fatalf("the executor process %d did not exit after the host stopped: %v", pid, err)
	}
	code := k.mustWait(ctx, t, s)
	hostGone := s.exitedAt.Sub(sent)
	v := k.mustInspect(ctx, t, h, s)
	k.note(t, "%s → executor process gone after %v, taskhost exited after %v", sigName(sig), pluginGone.Round(time.Millisecond), hostGone.Round(time.Millisecond))

	if v.Task.Status == "completed" || (len(v.Attempts) > 0 && v.Attempts[0].Status == "completed") {
		t.Fatalf("the %q task's first step ended before the kit's %s reached it (task %s):%s\nMake the first step of the scenario take at least 2 s.", ScenarioSlow, sigName(sig), v.Task, v.attemptLines())
	}
	if code != exitInterrupted || v.Task.Status != "interrupted" || v.Task.Reason != "host_shutdown" {
		t.Errorf("after %s the task is %s (taskhost exit %d), want interrupted (host_shutdown), exit %d:%s", sigName(sig), v.Task, code, exitInterrupted, v.attemptLines())
	}
	if last := v.Attempts[len(v.Attempts)-1]; last.Status != "interrupted" || last.Reason != "host_shutdown" {
		t.Errorf("the step running at %s: %s, want interrupted (host_shutdown)", sigName(sig), last)
	}
	if strings.Contains(s.stderr.String(), sdkStepNotReturned) {
		t.Errorf("Step did not return after its context was cancelled: the SDK gave up waiting for it after %v and ended the plugin under it "+
			"(a production host kills it then too, and whatever the step was doing is cut short at a random point).\n"+
			"Return from Step as soon as ctx is done: select on ctx.Done() wherever you wait, pass ctx to every Host call and to exec.CommandContext, and return ctx.Err().", hostStopGrace)
	}
	if limit := hostStopGrace + cancelMargin; pluginGone > limit {
		t.Errorf("the executor process lived %v after the host was stopped, more than the host's stop grace (%v) plus %v: a production host would have killed it and lost the step's work. "+
			"Return from Step when ctx is done, and do not ignore SIGTERM.", pluginGone.Round(time.Millisecond), hostStopGrace, cancelMargin)
	}
}

func (k *kit) checkResultTooLarge(t *testing.T) {
	ctx := k.context(t)
	h := k.newHost(t, k.opts.Binary)
	s := k.mustStart(ctx, t, h, ScenarioOversized)
	code := k.mustWait(ctx, t, s)
	v := k.mustInspect(ctx, t, h, s)
	if v.Task.Status == "completed" {
		t.Fatalf("the %q task completed with a result of %d bytes: the scenario must complete with a result over 64 KiB, so that the kit sees the host refuse it.", ScenarioOversized, len(v.Task.Result))
	}
	if code != exitFailed || v.Task.Status != "failed" || v.Task.Reason != "result_too_large" {
		t.Fatalf("the %q task ended %s (taskhost exit %d), want failed (result_too_large), exit %d.%s\n"+
			"Return the oversized result with sdk.Complete and let the host enforce its bound; do not fail or cut it yourself.", ScenarioOversized, v.Task, code, exitFailed, v.attemptLines())
	}
	if last := v.Attempts[len(v.Attempts)-1]; last.Status != "failed" || last.Reason != "result_too_large" {
		t.Errorf("the last attempt: %s, want failed (result_too_large)", last)
	}
}

func (k *kit) checkStepBudget(t *testing.T) {
	ctx := k.context(t)
	h := k.newHost(t, k.opts.Binary)
	s := k.mustStart(ctx, t, h, ScenarioLong, "--max-steps", "2")
	code := k.mustWait(ctx, t, s)
	v := k.mustInspect(ctx, t, h, s)
	if v.Task.Status == "completed" {
		t.Fatalf("the %q task completed in %d steps: the scenario must keep returning sdk.Continue for at least 3 steps.%s", ScenarioLong, v.completed(), v.attemptLines())
	}
	if code != exitFailed || v.Task.Status != "failed" || v.Task.Reason != "step_budget_exhausted" {
		t.Fatalf("with --max-steps 2 the %q task ended %s (taskhost exit %d), want failed (step_budget_exhausted), exit %d.%s", ScenarioLong, v.Task, code, exitFailed, v.attemptLines())
	}
	if len(v.Attempts) != 2 || v.completed() != 2 {
		t.Errorf("want exactly 2 completed attempts before the budget ran out:%s", v.attemptLines())
	}
	if steps := v.Task.Budgets["steps"]; steps.Used != 2 || steps.Limit != 2 {
		t.Errorf("step budget %d/%d, want 2/2", steps.Used, steps.Limit)
	}
}

func (k *kit) checkCrashResume(t *testing.T) {
	ctx := k.context(t)
	h, s, id, second, pid := k.mustCrashInSecondStep(ctx, t)
	killed := time.Now()
	if err := kill(pid); err != nil {
		t.Fatalf("SIGKILL the executor process %d: %v", pid, err)
	}
	crashed, err := s.waitLine(ctx, "the executor.crashed event", isEvent("executor.crashed"))
	if err != nil {
		t.Fatalf("after the executor process was SIGKILLed during a step: %v\nThe %q scenario's second step must take at least 2 s, so that the kill lands inside it.", err, ScenarioCrash)
	}
	code := k.mustWait(ctx, t, s)
	v := k.mustInspect(ctx, t, h, s)
	k.note(t, "SIGKILL → executor.crashed recorded after %v, taskhost exited after %v", crashed.read.Sub(killed).Round(time.Millisecond), s.exitedAt.Sub(killed).Round(time.Millisecond))
	if code != exitInterrupted || v.Task.Status != "interrupted" || v.Task.Reason != "executor_crashed" {
		t.Fatalf("after the SIGKILL the task is %s (taskhost exit %d), want interrupted (executor_crashed), exit %d:%s", v.Task, code, exitInterrupted, v.attemptLines())
	}
	var crashedAttempts []attemptView
	for _, a := range v.Attempts {
		if a.Status == "interrupted" {
			crashedAttempts = append(crashedAttempts, a)
		}
	}
	if len(crashedAttempts) != 1 || crashedAttempts[0].Reason != "executor_crashed" || crashedAttempts[0].Exit != "signal killed" {
		t.Errorf("want one attempt interrupted (executor_crashed) with exit \"signal killed\":%s", v.attemptLines())
	} else if got := crashedAttempts[0].Attempt; got != second.Payload.Attempt {
		t.Fatalf("precondition: the kit's SIGKILL, sent during attempt %d, landed in attempt %d: the %q scenario's second step ended between the kit's look and its kill. "+
			"Make that step take at least 2 s in Options.Spec(%q).%s", second.Payload.Attempt, got, ScenarioCrash, ScenarioCrash, v.attemptLines())
	}
	if v.completed() == 0 {
		t.Errorf("no step completed before the crash, so the resume starts from no checkpoint:%s\nMake the %q scenario's first step quick and its second slow.", v.attemptLines(), ScenarioCrash)
	}

	resumed := time.Now()
	s2, code := k.mustResume(ctx, t, h, ScenarioCrash, id)
	v, err = h.inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if code != exitOK || v.Task.Status != "completed" {
		t.Fatalf("taskhost run --resume %s ended %s (exit %d), want completed (exit 0):%s\n%s\n"+
			"The resumed step gets the checkpoint of the last completed step, and in StepRequest.Indeterminate the effects the killed attempt left in flight; it must carry on from there.",
			id, v.Task, code, v.attemptLines(), s2.diagnosis())
	}
	if v.Task.RunID != 2 {
		t.Errorf("the resumed task has run_id %d, want 2", v.Task.RunID)
	}
	if n := v.completed(); n < minCrashSteps {
		t.Fatalf("precondition: the %q task completed in %d steps over the kill and the resume; it must take at least %d. The kill lands in step 2, "+
			"so with fewer steps the resumed step is the last one and nothing shows that the task carried on from its checkpoint. Add steps in Options.Spec(%q).%s",
			ScenarioCrash, n, minCrashSteps, ScenarioCrash, v.attemptLines())
	}
	k.note(t, "resume completed in %v; %d completed steps over both runs", time.Since(resumed).Round(time.Millisecond), v.completed())
	k.checkEffects(t, ScenarioCrash, "the SIGKILL of the executor process and the resume", v)
	k.checkResult(t, ScenarioCrash, "after the SIGKILL of the executor process and the resume", v)
	if !t.Failed() {
		k.crash = &crashOutcome{completed: v.completed(), result: v.Task.Result}
	}
}

func (k *kit) checkCheckpointRoundTrip(t *testing.T) {
	if k.crash == nil {
		t.Skipf("needs the outcome of a passing %s check", CheckCrashResume)
	}
	ctx := k.context(t)
	h := k.newHost(t, k.opts.Binary)
	s := k.mustStart(ctx, t, h, ScenarioCrash)
	code := k.mustWait(ctx, t, s)
	v := k.mustInspect(ctx, t, h, s)
	if code != exitOK || v.Task.Status != "completed" {
		t.Fatalf("run without a crash, the %q task ended %s (taskhost exit %d), want completed:%s", ScenarioCrash, v.Task, code, v.attemptLines())
	}
	plain := v.completed()
	if plain < minCrashSteps {
		t.Fatalf("precondition: run without a crash, the %q task completed in %d steps; it must take at least %d. Add steps in Options.Spec(%q).%s",
			ScenarioCrash, plain, minCrashSteps, ScenarioCrash, v.attemptLines())
	}
	k.checkResult(t, ScenarioCrash, "run uninterrupted", v)
	k.note(t, "uninterrupted: %d steps; killed and resumed: %d steps", plain, k.crash.completed)
	if plain != k.crash.completed {
		t.Errorf("the %q task takes %d steps when it runs uninterrupted, but %d when its plugin is killed during step 2 and the task is resumed from step 1's checkpoint. "+
			"A resumed Step must carry on from req.Checkpoint, neither starting over nor skipping work: keep everything the next step needs in the checkpoint, not in process memory.",
			ScenarioCrash, plain, k.crash.completed)
	}
	if !jsonEqual(v.Task.Result, k.crash.result) {
		t.Logf("note: the results differ (uninterrupted %s, resumed %s); fine if your results are not deterministic", text.Clip(string(v.Task.Result), 300), text.Clip(string(k.crash.result), 300))
	}
}

func (k *kit) checkSchemaUpgrade(t *testing.T) {
	if k.opts.OldBinary == "" {
		t.Skip("Options.OldBinary is not set. To test the upgrade path, build your previous release and set OldBinary: the kit interrupts a task run by it " +
			"and resumes the task with Binary. Without one, check by hand that Step still reads every schema a released build wrote (docs/executor-sdk.md, \"Checkpoints\").")
	}
	ctx := k.context(t)
	old, err := describeBinary(ctx, k.opts.OldBinary, k.opts.Interpreted)
	if err != nil {
		t.Fatalf("Describe of Options.OldBinary: %v", err)
	}
	cur := k.desc
	if cur == nil {
		d, err := describeBinary(ctx, k.opts.Binary, k.opts.Interpreted)
		if err != nil {
			t.Fatalf("Describe of Options.Binary: %v", err)
		}
		cur = &d
	}
	k.note(t, "old build: %s", old)
	if old.Kind != k.opts.Kind || len(old.CheckpointSchemas) == 0 {
		t.Fatalf("Options.OldBinary describes itself as kind %q with schemas %q: it must be an earlier build of kind %q", old.Kind, old.CheckpointSchemas, k.opts.Kind)
	}
	if w := old.CheckpointSchemas[0]; !slices.Contains(cur.CheckpointSchemas, w) {
		t.Errorf("the old build writes checkpoints of schema %q (the first of its CheckpointSchemas), which this build does not accept (it accepts %q): "+
			"a task interrupted before an upgrade would fail closed with checkpoint_incompatible. Keep accepting every schema a released build wrote, and upgrade the payload when you read it.",
			w, cur.CheckpointSchemas)
	}

	h := k.newHost(t, k.opts.OldBinary)
	s := k.mustStart(ctx, t, h, ScenarioCrash)
	id := k.mustTaskID(ctx, t, s)
	second := k.mustReachSecondStep(ctx, t, s)
	k.mustStayBusy(ctx, t, s, second, ScenarioCrash, "second step")
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("signal taskhost: %v", err)
	}
	code := k.mustWait(ctx, t, s)
	v := k.mustInspect(ctx, t, h, s)
	if code != exitInterrupted || v.completed() == 0 {
		t.Fatalf("the old build's task should be interrupted after a completed step; it is %s (taskhost exit %d):%s", v.Task, code, v.attemptLines())
	}
	if err := h.install(k.opts.Binary); err != nil {
		t.Fatalf("executortest: %v", err)
	}
	s2, code := k.mustResume(ctx, t, h, ScenarioCrash, id)
	v, err = h.inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	k.checkEffects(t, ScenarioCrash, "the old build's interrupted run and the new build's resume", v)
	k.checkResult(t, ScenarioCrash, "resumed with the new build", v)
	if code != exitOK || v.Task.Status != "completed" {
		t.Errorf("resumed with the new build, the task ended %s (taskhost exit %d), want completed:%s\n%s\n"+
			"The new build must accept the old build's checkpoint (list its schema in CheckpointSchemas) and read its payload.", v.Task, code, v.attemptLines(), s2.diagnosis())
	}
}

func (k *kit) checkDeterminism(t *testing.T) {
	if k.opts.Spec(ScenarioDeterministic) == nil {
		t.Skipf("Options.Spec returns no %q scenario", ScenarioDeterministic)
	}
	ctx := k.context(t)
	var runs [2]inspectView
	for i := range runs {
		h := k.newHost(t, k.opts.Binary)
		s := k.mustStart(ctx, t, h, ScenarioDeterministic)
		code := k.mustWait(ctx, t, s)
		runs[i] = k.mustInspect(ctx, t, h, s)
		if code != exitOK || runs[i].Task.Status != "completed" {
			t.Fatalf("run %d of the %q task ended %s (taskhost exit %d), want completed:%s", i+1, ScenarioDeterministic, runs[i].Task, code, runs[i].attemptLines())
		}
		k.checkResult(t, ScenarioDeterministic, fmt.Sprintf("in run %d", i+1), runs[i])
	}
	a, b := runs[0], runs[1]
	if !jsonEqual(a.Task.Result, b.Task.Result) {
		t.Errorf("the two runs' results differ:\n  first:  %s\n  second: %s\nA deterministic executor must not put times, random values or map order into its result.", text.Clip(string(a.Task.Result), 500), text.Clip(string(b.Task.Result), 500))
	}
	if len(a.Attempts) != len(b.Attempts) {
		t.Fatalf("the two runs took %d and %d attempts:\nfirst:%s\nsecond:%s", len(a.Attempts), len(b.Attempts), a.attemptLines(), b.attemptLines())
	}
	for i := range a.Attempts {
		x, y := a.Attempts[i], b.Attempts[i]
		if x.Status != y.Status || x.Outcome != y.Outcome || x.Summary != y.Summary {
			t.Errorf("step %d differs between the runs:\n  first:  %s\n  second: %s", i+1, x, y)
		}
	}
	k.note(t, "2 runs of %d steps agree", len(a.Attempts))
}

// ---- helpers that end the check on error ----

func (k *kit) mustStart(ctx context.Context, t *testing.T, h *host, scenario string, args ...string) *session {
	t.Helper()
	s, err := h.startScenario(ctx, t, scenario, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return s
}

// mustWait waits for taskhost to exit and ends the check when it refused
// to run the task at all.
func (k *kit) mustWait(ctx context.Context, t *testing.T, s *session) int {
	t.Helper()
	code, err := s.wait(ctx)
	if err != nil {
		t.Fatalf("%v", err)
	}
	k.checkInputs(t, s)
	switch code {
	case exitUnavailable:
		t.Fatalf("taskhost could not run the task (exit %d): %s\nWhen the host says the executor is unavailable, fix that first: the %s check says more.", code, s.diagnosis(), CheckDescribe)
	case exitUsage:
		t.Fatalf("taskhost refused the run (exit %d): %s\nCheck Options.Config and the scenario's spec.", code, s.diagnosis())
	}
	return code
}

func (k *kit) mustTaskID(ctx context.Context, t *testing.T, s *session) string {
	t.Helper()
	id, err := s.taskID(ctx)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return id
}

func (k *kit) mustInspect(ctx context.Context, t *testing.T, h *host, s *session) inspectView {
	t.Helper()
	id := k.mustTaskID(ctx, t, s)
	v, err := h.inspect(ctx, id)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(v.Attempts) == 0 {
		t.Fatalf("task %s is %s and has no attempts: %s", id, v.Task, s.diagnosis())
	}
	return v
}

// mustCrashInSecondStep starts a task of the crash scenario on a new host
// and waits until its second step has run for the kit's floor: the moment a
// crash check kills something. It returns the host, the session, the task,
// the line that started the step and the executor process's pid.
func (k *kit) mustCrashInSecondStep(ctx context.Context, t *testing.T) (*host, *session, string, runLine, int) {
	t.Helper()
	h := k.newHost(t, k.opts.Binary)
	s := k.mustStart(ctx, t, h, ScenarioCrash)
	id := k.mustTaskID(ctx, t, s)
	second := k.mustReachSecondStep(ctx, t, s)
	k.mustStayBusy(ctx, t, s, second, ScenarioCrash, "second step")
	return h, s, id, second, k.mustFindPlugin(ctx, t, h, s, ScenarioCrash)
}

// mustReachSecondStep waits until a step after the first has started and
// returns the line that said so.
func (k *kit) mustReachSecondStep(ctx context.Context, t *testing.T, s *session) runLine {
	t.Helper()
	l, err := s.waitLine(ctx, "the second step to start", func(l runLine) bool {
		return l.Kind == "event" && l.Type == "step.started" && l.Payload.Attempt >= 2
	})
	if err != nil {
		t.Fatalf("%v\nThe %q scenario must take at least 3 steps, the second of them at least 2 s long.", err, ScenarioCrash)
	}
	return l
}

// mustStayBusy checks the precondition of a check that interrupts a slow
// step: the step that started must still run slowFloor after the kit saw
// it start. A quicker step would race the kit's signal, and the check
// would pass or fail by chance; the kit refuses it, saying which scenario
// to change. The wait is the measurement, not a synchronisation: the step
// is watched, through the events, for the whole floor.
func (k *kit) mustStayBusy(ctx context.Context, t *testing.T, s *session, started runLine, scenario, which string) {
	t.Helper()
	hold, cancel := context.WithDeadline(ctx, started.read.Add(slowFloor))
	defer cancel()
	pos := s.cursor // look ahead without taking the lines from the check
	end, err := s.scan(hold, "the end of the "+which, &pos, func(l runLine) bool { return stepEnded(l, started.Payload.Attempt) })
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		s.mu.Lock()
		eof := s.eof
		s.mu.Unlock()
		if !eof {
			t.Logf("precondition met: the %s (attempt %d) still ran %v after it started", which, started.Payload.Attempt, slowFloor)
			return
		}
	}
	took := "an unknown time"
	if err == nil {
		took = end.read.Sub(started.read).Round(time.Millisecond).String()
	}
	t.Fatalf("precondition: the %q scenario's %s (attempt %d) ended %s after it started, under the kit's floor of %v: the check interrupts that step and cannot mean anything when the step is over before the kit's signal lands. "+
		"Make it take at least 2 s in Options.Spec(%q) (for example a pause that selects on ctx.Done()).%s",
		scenario, which, started.Payload.Attempt, took, slowFloor, scenario, errSuffix(err))
}

// stepEnded reports whether l says that the step of attempt ended, or the
// task or the run did.
func stepEnded(l runLine, attempt int64) bool {
	if l.Kind == "result" {
		return true
	}
	if l.Kind != "event" {
		return false
	}
	switch l.Type {
	case "step.completed", "step.interrupted", "executor.crashed":
		return l.Payload.Attempt == attempt
	case "task.completed", "task.failed", "task.cancelled", "task.interrupted":
		return true
	}
	return false
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return "\n" + err.Error()
}

// mustFindPlugin returns the pid of the executor process serving s's task.
func (k *kit) mustFindPlugin(ctx context.Context, t *testing.T, h *host, s *session, scenario string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		pid, err := findChild(s.cmd.Process.Pid, h.plugin)
		if err == nil {
			return pid
		}
		if !errors.Is(err, errNoPlugin) {
			t.Fatalf("%v", err)
		}
		select {
		case <-s.exited:
			t.Fatalf("taskhost ended before the kit found the executor process: %s\nThe %q scenario's step must still be running by then (take at least 2 s).", s.diagnosis(), scenario)
		case <-ctx.Done():
			t.Fatalf("no process of %s under taskhost (pid %d): %v", h.plugin, s.cmd.Process.Pid, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitGone polls until pid has exited and returns how long that took,
// failing after limit.
func waitGone(ctx context.Context, pid int, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !gone(pid) {
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("still running after %v: %w", time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-tick.C:
		}
	}
	return time.Since(start), nil
}

// kill SIGKILLs pid.
func kill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func isEvent(typ string) func(runLine) bool {
	return func(l runLine) bool { return l.Kind == "event" && l.Type == typ }
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// jsonEqual compares two JSON values by meaning, not by spelling.
func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

package executortest

import (
	"testing"
	"time"
)

// checkHostCrashResume SIGKILLs the host itself, the foreground taskhost,
// during the crash scenario's second step: the plugin must die with it, and
// a new host must recover the task as interrupted and complete it on
// resume, without an effect of the killed step running twice.
func (k *kit) checkHostCrashResume(t *testing.T) {
	ctx := k.context(t)
	h, s, id, second, pid := k.mustCrashInSecondStep(ctx, t)
	killed := time.Now()
	if err := kill(s.cmd.Process.Pid); err != nil {
		t.Fatalf("SIGKILL taskhost (pid %d): %v", s.cmd.Process.Pid, err)
	}
	select {
	case <-s.exited:
	case <-ctx.Done():
		t.Fatalf("taskhost did not exit after its SIGKILL: %v", ctx.Err())
	}
	if _, err := waitGone(ctx, pid, hostStopGrace+5*time.Second); err != nil {
		t.Fatalf("the executor process %d outlived the SIGKILLed host: %v\n"+
			"A plugin must end when its host dies: sdk.Serve does (a parent-death signal, and a check of the parent pid); do not block or ignore SIGKILL's companions, and do not re-parent the process.", pid, err)
	}
	k.note(t, "SIGKILL of taskhost → executor process gone %v after the kill", time.Since(killed).Round(time.Millisecond))

	s2, code := k.mustResume(ctx, t, h, ScenarioCrash, id)
	v, err := h.inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if code != exitOK || v.Task.Status != "completed" {
		t.Fatalf("after the SIGKILL of taskhost, taskhost run --resume %s ended %s (exit %d), want completed (exit 0):%s\n%s\n"+
			"The recovered task resumes from the checkpoint of its last completed step, with the killed attempt's calls in flight in StepRequest.Indeterminate.",
			id, v.Task, code, v.attemptLines(), s2.diagnosis())
	}
	var cut []attemptView
	for _, a := range v.Attempts {
		if a.Status == "interrupted" {
			cut = append(cut, a)
		}
	}
	if len(cut) != 1 {
		t.Errorf("want one attempt interrupted by the SIGKILL of taskhost:%s", v.attemptLines())
	} else if cut[0].Attempt != second.Payload.Attempt {
		t.Fatalf("precondition: the SIGKILL of taskhost, sent during attempt %d, cut attempt %d: the %q scenario's second step ended between the kit's look and its kill. "+
			"Make that step take at least 2 s in Options.Spec(%q).%s", second.Payload.Attempt, cut[0].Attempt, ScenarioCrash, ScenarioCrash, v.attemptLines())
	}
	if n := v.completed(); n < minCrashSteps {
		t.Fatalf("precondition: the %q task completed in %d steps over the kill and the resume; it must take at least %d. Add steps in Options.Spec(%q).%s",
			ScenarioCrash, n, minCrashSteps, ScenarioCrash, v.attemptLines())
	}
	k.note(t, "recovered and resumed: completed in %v after the kill; %d completed steps over both runs", time.Since(killed).Round(time.Millisecond), v.completed())
	k.checkEffects(t, ScenarioCrash, "the SIGKILL of taskhost (the host) and the resume", v)
	k.checkResult(t, ScenarioCrash, "after the SIGKILL of taskhost and the resume", v)
}

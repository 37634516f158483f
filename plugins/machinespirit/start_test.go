package machinespirit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/sdk"
)

// blockingSwipl is a fake swipl whose --version blocks until release is
// called, then prints something that is not SWI-Prolog's version line.
// waitStarted returns once it runs.
func blockingSwipl(t *testing.T) (path string, waitStarted, release func()) {
	t.Helper()
	dir := t.TempDir()
	fifo, mark := filepath.Join(dir, "fifo"), filepath.Join(dir, "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "swipl")
	script := "#!/bin/sh\necho started > " + mark + "\nread line < " + fifo + "\necho 'released, not prolog'\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	waitStarted = func() { testwait.File(t, mark) }
	release = func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if _, err := f.WriteString("go\n"); err != nil {
			t.Error(err)
		}
	}
	return path, waitStarted, release
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestStartWaitsForPreflight: Start returns while the preflight still
// runs; until it ends, Describe does not answer (so the host cannot take
// the executor for ready) and no step runs; then both report its failure.
func TestStartWaitsForPreflight(t *testing.T) {
	t.Parallel()
	swipl, waitStarted, release := blockingSwipl(t)
	e := Start(context.Background(), Config{SwiplPath: swipl, SwiplVersion: testVersion})
	defer e.Close()
	if kind, version := e.Identity(); kind != Kind || version != Version {
		t.Fatalf("Identity = %q, %q", kind, version)
	}
	waitStarted()

	described := make(chan sdk.Description, 1)
	go func() { described <- e.Describe() }()
	// The fake swipl blocks until released: the preflight cannot have
	// ended, so neither may Describe.
	select {
	case d := <-described:
		t.Fatalf("Describe answered during the preflight: %v", d.Runtime)
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := e.Step(ctx, newFakeHost(1), stepReq(parSpec(), nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Step during the preflight with its context ended: %+v, %v", res, err)
	}

	release()
	var d sdk.Description
	testwait.Until(t, 30*time.Second, "Describe to answer once the preflight ended", func() bool {
		select {
		case d = <-described:
			return true
		default:
			return false
		}
	})
	if p := d.Runtime["preflight"]; !strings.HasPrefix(p, "failed: swipl_version: unexpected output") {
		t.Fatalf("preflight = %q", p)
	}
	res, err := e.Step(context.Background(), newFakeHost(1), stepReq(parSpec(), nil))
	if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, "preflight") {
		t.Fatalf("step after the failed preflight: %+v, %v", res, err)
	}
}

// TestCloseDuringPreflight: Close cancels a preflight still running (its
// swipl is killed, not waited for) and the executor reports it failed.
func TestCloseDuringPreflight(t *testing.T) {
	t.Parallel()
	swipl, waitStarted, _ := blockingSwipl(t)
	e := Start(context.Background(), Config{SwiplPath: swipl, SwiplVersion: testVersion})
	waitStarted()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Close()
	}()
	testwait.Until(t, 30*time.Second, "Close during the preflight to return", func() bool { return closed(done) })
	// Cancelled, not timed out: Close did not wait for the check's bound.
	if p := e.Describe().Runtime["preflight"]; !strings.HasPrefix(p, "failed: swipl_version:") || !strings.Contains(p, context.Canceled.Error()) {
		t.Fatalf("preflight after Close = %q, want a swipl_version failure by %v", p, context.Canceled)
	}
}

// TestStartOK: a started executor reaches the same ready state as New.
func TestStartOK(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	e := Start(context.Background(), testConfig(t, nil))
	defer e.Close()
	if p := e.Describe().Runtime["preflight"]; p != "ok" {
		t.Fatalf("preflight: %s", p)
	}
	results, _ := runToEnd(t, e, newFakeHost(1), parSpec(), nil, 10)
	if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete {
		t.Fatalf("last: %+v", last)
	}
}

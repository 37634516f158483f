package sdk

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// stopOnSignalOrOrphan stops the plugin when the host asks it to (SIGTERM)
// or when the host is gone, and exits.
//
// Either way the running step's context is cancelled first and the
// executor gets stopTimeout to return, so that it can stop the work it
// started: without this, Go's default SIGTERM action would kill the plugin
// at once, and an orphaned plugin's own children would outlive it.
//
// After SIGTERM the plugin dies by SIGTERM, so its wait status stays the
// truth about why it ended; after the host's death it exits with
// orphanExitCode.
func stopOnSignalOrOrphan(logger hclog.Logger, gate *stepGate) {
	// Registered before the parent is recorded, so there is no moment at
	// which SIGTERM would kill the plugin outright.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	w := newParentWatch(os.Getppid, parentPollInterval)
	w.exited = waitExit
	orphaned := make(chan int, 1)
	go func() {
		if p, err := w.wait(context.Background()); err == nil {
			orphaned <- p
		}
	}()
	go func() {
		select {
		case <-sigs:
			logger.Info("SIGTERM: stopping the running step and exiting")
			stopStep(logger, gate)
			signal.Reset(syscall.SIGTERM)
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			// The signal is delivered asynchronously; should it not land,
			// exit with the status a shell would report for it.
			time.Sleep(time.Second)
			os.Exit(128 + int(syscall.SIGTERM))
		case p := <-orphaned:
			logger.Error("host process is gone; stopping the running step and exiting", "host_pid", w.parent, "new_parent_pid", p)
			stopStep(logger, gate)
			os.Exit(orphanExitCode)
		}
	}()
}

func stopStep(logger hclog.Logger, gate *stepGate) {
	if !gate.stop(stopTimeout) {
		logger.Warn("the running step did not return after its context was cancelled", "waited", stopTimeout)
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// clientGrace is how long a client command may take to wind down after
// SIGTERM or SIGINT. Every client command ends through its context; this
// bounds one blocked where no context reaches (a read of a terminal, a
// stuck peer), so a signal always ends it.
const clientGrace = 2 * time.Second

// clientCommands are the commands that only talk to a daemon: nothing of
// theirs needs a graceful stop. The others own a host (serve, run, demo,
// bench) or a store copy (backup) and end on their own once ctx ends.
var clientCommands = map[string]bool{
	"task": true, "approvals": true, "approve": true, "reject": true, "executors": true, "token": true,
}

// exitAfterSignal ends the process with exitSignal clientGrace after ctx
// ends by a signal, or at a second signal, if args run a client command.
func exitAfterSignal(ctx context.Context, stderr io.Writer, args []string) {
	if len(args) == 0 || !clientCommands[args[0]] {
		return
	}
	again := make(chan os.Signal, 1)
	<-ctx.Done()
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	t := time.NewTimer(clientGrace)
	select {
	case <-t.C:
	case <-again:
	}
	fmt.Fprintln(stderr, "taskhost: stopped by a signal")
	os.Exit(exitSignal)
}

// logHangups keeps SIGHUP from ending the daemon: a closed terminal or a
// log rotation's `kill -HUP` is logged, and the daemon serves on. It
// returns a func that restores the default.
func logHangups(log hclog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				log.Info("SIGHUP received: the daemon keeps running (its log goes to stderr, there is nothing to reopen; restart it to apply a new config)")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

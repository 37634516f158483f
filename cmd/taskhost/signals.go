package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
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

// reopenFile is a log file that SIGHUP reopens, so that a rotation's
// rename-then-HUP moves the log to a fresh file. Writes and the reopen are
// serialised: a record never straddles two files.
type reopenFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func openLogFile(path string) (*reopenFile, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	return &reopenFile{path: path, f: f}, nil
}

// openAppend opens path for appending, creating it 0600; an existing file
// keeps its mode.
func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
}

func (r *reopenFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Write(p)
}

// Reopen opens the path again and swaps the new file in; on an error the
// old file stays in use.
func (r *reopenFile) Reopen() error {
	f, err := openAppend(r.path)
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := r.f
	r.f = f
	r.mu.Unlock()
	return old.Close()
}

func (r *reopenFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/api"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/metrics"
)

// foregroundDaemon is the daemon `taskhost run` starts in its own process:
// the data dir's host, solo (it starts what it is asked to at once and
// never the queue's), with its API on a socket in a directory of its own
// (0700, under $TMPDIR) that nothing else is told of, answering this uid
// alone. The run then drives its task through that API exactly as `task
// create --watch` drives a daemon's. No TCP listener, no /metrics, no
// retention sweep: those are the served daemon's.
type foregroundDaemon struct {
	h      *host.Host
	srv    *api.Server
	dir    string // the socket's private directory
	socket string
}

// startForegroundDaemon opens the host on dataDir and serves its API on a
// private socket.
func startForegroundDaemon(ctx context.Context, log hclog.Logger, dataDir string, cfg config.Config) (*foregroundDaemon, error) {
	h, err := openDaemonHost(ctx, log, daemonOptions{dataDir: dataDir, cfg: cfg, solo: true}, metrics.NewInstruments())
	if err != nil {
		return nil, err
	}
	d := &foregroundDaemon{h: h}
	fail := func(err error) (*foregroundDaemon, error) {
		d.stop(context.WithoutCancel(ctx))
		return nil, err
	}
	if d.dir, err = os.MkdirTemp("", "taskhost-run-"); err != nil {
		return fail(fmt.Errorf("the run's private socket directory: %w", err))
	}
	principals := map[uint32]string{uint32(os.Getuid()): localPrincipal()}
	if d.srv, err = newAPIServer(h, cfg, principals, nil, log); err != nil {
		return fail(err)
	}
	ln, err := api.ListenUnix(d.dir, -1)
	if err != nil {
		return fail(err)
	}
	d.socket = ln.Addr().String()
	d.srv.Serve(ln)
	return d, nil
}

// interrupt stops the host's tasks: a running one becomes interrupted
// (host_shutdown), which its watch then sees and ends on.
func (d *foregroundDaemon) interrupt(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	return d.h.Runner.Shutdown(sctx)
}

// stop stops the tasks, then the API, then the host, and removes the
// socket's directory.
func (d *foregroundDaemon) stop(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	err := d.h.Runner.Shutdown(sctx)
	if d.srv != nil {
		d.srv.Stop(sctx)
	}
	err = errors.Join(err, d.h.Close(sctx))
	if d.dir != "" {
		err = errors.Join(err, os.RemoveAll(d.dir))
	}
	return err
}

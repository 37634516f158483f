package main

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/metrics"
)

// daemonMetrics is the optional /metrics and /healthz listener of
// `taskhost serve` ([api] metrics_listen). Its zero value is off.
type daemonMetrics struct {
	log  hclog.Logger
	srv  *metrics.Server
	addr string
}

// listenMetrics binds addr (a loopback address) and serves on it; /healthz
// stays 503 until serving. An empty addr is off.
func listenMetrics(log hclog.Logger, addr string, src metrics.Source, inst *metrics.Instruments) (daemonMetrics, error) {
	if addr == "" {
		return daemonMetrics{}, nil
	}
	ln, err := metrics.Listen(addr)
	if err != nil {
		return daemonMetrics{}, err
	}
	m, err := metrics.New(metrics.Options{Source: src, Version: version, Logger: log, Instruments: inst})
	if err != nil {
		ln.Close()
		return daemonMetrics{}, err
	}
	m.Serve(ln)
	return daemonMetrics{log: log, srv: m, addr: ln.Addr().String()}, nil
}

// serving reports the daemon as serving its API.
func (d daemonMetrics) serving() {
	if d.srv != nil {
		d.srv.SetServing(true)
	}
}

// stop takes the listener down. The daemon calls it as soon as it starts
// to stop, so that a health checker sees the daemon go before its tasks do.
func (d daemonMetrics) stop(ctx context.Context) {
	if d.srv == nil {
		return
	}
	if err := d.srv.Close(ctx); err != nil {
		d.log.Warn("metrics listener: stop", "error", err)
	}
}

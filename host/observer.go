package host

import "time"

// Observer is told, as they happen, the events the daemon's metrics count
// that the store does not keep: plugin starts and crashes, step durations
// and store commits. Every method must return at once. *metrics.Instruments
// implements it; the labels it is given come from closed sets (configured
// executor kinds, the store's statuses and reasons).
type Observer interface {
	PluginStarted(executor string)
	PluginCrashed(executor string, reason string)
	StepFinished(executor string, status string, d time.Duration)
	StoreCommitted(d time.Duration)
	// RunLost counts a task the liveness check interrupted (run_lost).
	RunLost()
	// StoreRetried: a write transaction is run again after losing a race,
	// failing with SQLSTATE sqlstate.
	StoreRetried(sqlstate string)
	// StoreFenced: the store refused a write of a run that is over.
	StoreFenced()
	// HeartbeatSent: this host's heartbeat reached the store at.
	HeartbeatSent(at time.Time)
	// FleetHeartbeats: the heartbeat age of each host of the fleet, as
	// this host read them.
	FleetHeartbeats(ages map[string]time.Duration)
	// RunsSwept: this host took over n runs of lost hosts.
	RunsSwept(n int)
	// SelfFenced: this host stopped its runs, unable to heartbeat.
	SelfFenced()
	// ListenReconnected: the fleet notification connection broke and is
	// made again.
	ListenReconnected()
	// ModelCalled: a model call returned a reply, with the tokens the
	// endpoint reported and its duration.
	ModelCalled(promptTokens, completionTokens int64, d time.Duration)
}

// NopObserver is the Observer of a host without metrics: it counts nothing.
type NopObserver struct{}

func (NopObserver) PluginStarted(string)                       {}
func (NopObserver) PluginCrashed(string, string)               {}
func (NopObserver) StepFinished(string, string, time.Duration) {}
func (NopObserver) StoreCommitted(time.Duration)               {}
func (NopObserver) RunLost()                                   {}
func (NopObserver) StoreRetried(string)                        {}
func (NopObserver) StoreFenced()                               {}
func (NopObserver) HeartbeatSent(time.Time)                    {}
func (NopObserver) FleetHeartbeats(map[string]time.Duration)   {}
func (NopObserver) RunsSwept(int)                              {}
func (NopObserver) SelfFenced()                                {}
func (NopObserver) ListenReconnected()                         {}
func (NopObserver) ModelCalled(int64, int64, time.Duration)    {}

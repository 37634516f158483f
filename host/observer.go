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
}

// nopObserver is the Observer of a host without metrics.
type nopObserver struct{}

func (nopObserver) PluginStarted(string)                       {}
func (nopObserver) PluginCrashed(string, string)               {}
func (nopObserver) StepFinished(string, string, time.Duration) {}
func (nopObserver) StoreCommitted(time.Duration)               {}
func (nopObserver) RunLost()                                   {}

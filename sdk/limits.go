package sdk

import (
	"time"
)

const (
	// maxMessageBytes bounds every gRPC message in both directions, on both
	// the executor service and the host-services connection. go-plugin's
	// defaults are asymmetric (the client accepts ~2 GiB, a server 4 MiB), so
	// the SDK sets the bound explicitly everywhere.
	maxMessageBytes = 4 << 20

	// maxFailMessageBytes bounds the message of a failed step. The host keeps
	// it in the store and in events, so it must not grow with an error chain.
	maxFailMessageBytes = 2000

	// parentPollInterval is how often the plugin checks that the host that
	// started it is still its parent.
	parentPollInterval = 100 * time.Millisecond

	// orphanExitCode is the exit status of a plugin whose host died.
	orphanExitCode = 3

	// stopTimeout bounds how long a stopping plugin waits for the running
	// step to return after cancelling it. It matches the host's default
	// stop grace, after which the host kills the process group anyway; an
	// orphaned plugin has nobody to do that for it.
	stopTimeout = 2 * time.Second
)

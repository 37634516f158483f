// Command taskhost-executor-legacy is the legacy executor plugin: the host
// starts it for a running task and drives it over go-plugin's gRPC. See
// package legacy for what one step does.
package main

import (
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/plugins/legacy"
	"github.com/taskhost/taskhost/sdk"
)

func main() {
	// JSON lines on stderr, which the host parses and re-logs; stdout
	// belongs to go-plugin's handshake. The logger holds stderr as it is
	// now, before go-plugin swaps os.Stderr for a pipe of its own.
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "legacy",
		Level:      hclog.Info,
		Output:     os.Stderr,
		JSONFormat: true,
	})
	sdk.Serve(legacy.New(logger))
}

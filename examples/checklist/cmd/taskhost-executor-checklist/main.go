// Command taskhost-executor-checklist is the checklist executor as a
// taskhost plugin. The host starts it for a running task; see package
// checklist for what a step does.
package main

import (
	"example.com/checklist"

	"github.com/taskhost/taskhost/sdk"
)

func main() {
	// Nothing may be printed to stdout before Serve: the go-plugin
	// handshake is the first line there.
	sdk.Serve(checklist.Executor{})
}

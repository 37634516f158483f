package tools

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/taskhost/taskhost/host/config"
)

// A shell.run command has no network by default: it cannot reach a
// listener of the host's, even on 127.0.0.1. A root daemon gives it a
// network namespace of its own whose loopback is up (a connection to a port
// nobody listens on there is refused, not unreachable); one that is not
// root refuses it every socket but a unix one. [tools."shell.run"] network
// = true gives the host's network back. Before, every command had it.
func TestShellRunHasNoNetworkByDefault(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	probe := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && echo CONNECTED' 2>&1`, port)
	run := func(r *Registry) string {
		var out struct {
			Output string `json:"output"`
		}
		res, err := callTool(t, t.Context(), r, ToolShellRun, map[string]any{"command": probe})
		if err != nil {
			t.Fatal(err)
		}
		decode(t, res, &out)
		return out.Output
	}

	off := run(newTestRegistry(t, nil))
	if strings.Contains(off, "CONNECTED") || accepted.Load() != 0 {
		t.Fatalf("a command without network reached the host's listener: %q (accepted %d)", off, accepted.Load())
	}
	want := "Connection refused" // its own loopback, up, with nothing on the port
	if os.Geteuid() != 0 {
		want = "ermission denied" // seccomp: no socket but a unix one
	}
	if !strings.Contains(off, want) {
		t.Errorf("without network: %q, want %q", off, want)
	}

	sh := config.Default().Tools[ToolShellRun]
	sh.Network = true
	on := run(newTestRegistry(t, map[string]config.Tool{ToolShellRun: sh}))
	if !strings.Contains(on, "CONNECTED") {
		t.Fatalf("network = true: %q (accepted %d), want the host's listener reached", on, accepted.Load())
	}
	// The kernel completed the connection; the accepting goroutine may
	// not have counted it yet on a loaded machine.
	waitFor(t, "the host's listener to accept the command's connection", func() bool { return accepted.Load() == 1 })
}

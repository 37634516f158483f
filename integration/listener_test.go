package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// fdCount is the number of open descriptors of process pid.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// The probes against the real daemon: 300 idle TCP connections to
// the token listener, then wrong tokens from the command line. The daemon's
// descriptors stay within its connection cap, socket and token callers are
// served, wrong tokens are throttled and their log lines bounded.
func TestTokenListenerFloodAndBruteForce(t *testing.T) {
	t.Parallel()
	const token = "flood-test-token-0123456789abcdef"
	const maxConns = 64
	work := testwait.ShortTempDir(t)
	sum := sha256.Sum256([]byte(token))
	// No pre-started plugins: their descriptors, opened in the background
	// as the pool fills, would move the count this test measures.
	cfg := writeConfig(t, work, fmt.Sprintf(`
[tasks]
prestart = 0

[api]
tcp_listen = "127.0.0.1:0"
max_connections = %d
first_request_timeout_seconds = 1

[api.tokens]
ci = "%s"
`, maxConns, hex.EncodeToString(sum[:])))
	d := startDaemon(t, testwait.ShortTempDir(t), cfg)
	pid := d.cmd.Process.Pid
	base := fdCount(t, pid)

	var peakMu sync.Mutex
	peak := base
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				peakMu.Lock()
				peak = max(peak, len(ents))
				peakMu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var idle []net.Conn
	for range 300 {
		c, err := net.Dial("tcp", d.tcp)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	withToken := func(tok string, args ...string) (string, string, int) {
		cmd := exec.Command(filepath.Join(binDir, "taskhost"), append(args, "--address", d.tcp)...)
		cmd.Env = []string{"HOME=/tmp", "TASKHOST_TOKEN=" + tok}
		return runCmd(t, cmd)
	}
	// Flooded: the socket answers at once, the token listener once the
	// idle connections ahead of it have timed out.
	if out, errOut, code := d.cli(t, "task", "list", "--json"); code != 0 {
		t.Fatalf("unix socket caller during the flood: exit %d\n%s%s", code, out, errOut)
	}
	// A token caller queued behind 300 connections may time out connecting
	// (the CLI gives up after 2 s): it gets through once the idle ones
	// ahead of it have been closed.
	start := time.Now()
	tries := 0
	testwait.Until(t, 30*time.Second, "a token call to get through", func() bool {
		tries++
		_, _, code := withToken(token, "task", "list", "--json")
		return code == 0
	})
	tokenWait := time.Since(start)
	testwait.Until(t, 30*time.Second, "the idle connections to be closed", func() bool { return fdCount(t, pid) <= base+2 })
	close(stop)
	<-sampled
	if peak > base+maxConns+8 {
		t.Fatalf("the daemon's descriptors peaked at %d (%d before the flood, cap %d)", peak, base, maxConns)
	}
	t.Logf("300 idle TCP connections: daemon fds %d before, peak %d, after %d (cap %d); a token call got through in %v (%d tries)",
		base, peak, fdCount(t, pid), maxConns, tokenWait.Round(time.Millisecond), tries)

	// Wrong tokens from the command line: a few are checked, the rest
	// refused before the check, each with a reason; one log line.
	reasons := map[string]int{}
	for range 30 {
		_, errOut, code := withToken("wrong-"+token, "task", "list", "--json")
		var e struct {
			Error struct {
				Reason string `json:"reason"`
			} `json:"error"`
		}
		if code != 7 || json.Unmarshal([]byte(errOut), &e) != nil {
			t.Fatalf("wrong token: exit %d %s", code, errOut)
		}
		reasons[e.Error.Reason]++
	}
	// Five are checked before the first backoff; after that a wrong token
	// is checked only once each doubling interval (1 s, 2 s, 4 s, ...) has
	// passed, so a slow machine sees a few more checked, never many.
	if b, th := reasons["BAD_TOKEN"], reasons["THROTTLED"]; b < 5 || b > 10 || b+th != 30 {
		t.Fatalf("30 wrong tokens: %v, want 5 to 10 checked and the rest throttled", reasons)
	}
	if n := strings.Count(d.logText(), "api call refused"); n > 2 {
		t.Fatalf("%d refusal log lines for 30 wrong tokens", n)
	}
	t.Logf("30 wrong tokens: %v, %d log lines", reasons, strings.Count(d.logText(), "api call refused"))
	// The socket is never throttled.
	if _, errOut, code := d.cli(t, "task", "list"); code != 0 {
		t.Fatalf("unix socket caller after the brute force: exit %d %s", code, errOut)
	}
}

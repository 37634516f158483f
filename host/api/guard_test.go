package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) lines(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

func withLog(b *logBuffer) serverOpt {
	return func(o *Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: b, Level: hclog.Debug})
	}
}

// serverSideConns counts this process's descriptors that are accepted
// connections of the TCP listener on port: sockets whose local port is
// port and that are not the listener itself.
func serverSideConns(t *testing.T, port int) int {
	t.Helper()
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			_, lport, _ := strings.Cut(fields[1], ":")
			p, err := strconv.ParseUint(lport, 16, 16)
			if err != nil || int(p) != port || fields[3] == "0A" { // 0A: LISTEN
				continue
			}
			inodes[fields[9]] = true
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue
		}
		if in, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(in, "]")] {
			n++
		}
	}
	return n
}

// TestIdleTCPConnectionsAreCappedAndClosed is the fd-exhaustion probe: cap+50
// idle connections to the token listener. The daemon holds at most cap of
// them, closes each at its first-request deadline, and unix-socket callers
// and a token caller are served throughout.
func TestIdleTCPConnectionsAreCappedAndClosed(t *testing.T) {
	const limit = 16
	ts := startServer(t, func(o *Options) {
		o.Listener.MaxConns = limit
		o.Listener.FirstRequestTimeout = time.Second
	})
	_, portStr, _ := net.SplitHostPort(ts.tcpAddr)
	port, _ := strconv.Atoi(portStr)

	var idle []net.Conn
	for range limit + 50 {
		c, err := net.Dial("tcp", ts.tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	// Sample the daemon's side all along: it must never hold more than
	// the cap.
	var peakMu sync.Mutex
	peak := 0
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			n := serverSideConns(t, port)
			peakMu.Lock()
			peak = max(peak, n)
			peakMu.Unlock()
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	testwait.Until(t, 5*time.Second, "the daemon did not accept up to its cap", func() bool { return serverSideConns(t, port) == limit })

	// The cap is full of idle connections: the unix socket still answers.
	hc := apipb.NewHostServiceClient(ts.unixConn(t))
	if _, err := hc.GetInfo(ctxT(t), &apipb.GetInfoRequest{}); err != nil {
		t.Fatalf("unix socket caller with the TCP cap full: %v", err)
	}
	// Each idle connection is closed at its deadline; the queued ones are
	// accepted in turn and closed too, and a token caller gets through.
	tc := apipb.NewHostServiceClient(ts.tokenConn(t, goodToken))
	if _, err := tc.GetInfo(ctxT(t), &apipb.GetInfoRequest{}); err != nil {
		t.Fatalf("token caller behind %d idle connections: %v", limit+50, err)
	}
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		// The server's SETTINGS may come first; then the end.
		if _, err := io.Copy(io.Discard, c); err == nil {
			closed++
		}
	}
	close(stopSampling)
	<-sampled
	if closed != len(idle) {
		t.Fatalf("%d of %d idle connections were closed by the daemon", closed, len(idle))
	}
	if peak > limit {
		t.Fatalf("the daemon held %d TCP connections, cap %d", peak, limit)
	}
	testwait.Until(t, 5*time.Second, "idle connections still held", func() bool { return serverSideConns(t, port) <= 1 })
	t.Logf("%d idle connections: the daemon held at most %d (cap %d) and closed all of them", len(idle), peak, limit)
}

// TestWrongTokensAreThrottled is the brute-force probe: 200 wrong tokens
// from one peer. After FailuresBeforeBackoff of them the peer is refused
// without a token check, and the refusals make one log line.
func TestWrongTokensAreThrottled(t *testing.T) {
	var logs logBuffer
	ts := startServer(t, withLog(&logs), func(o *Options) {
		o.Listener.BackoffBase = 2 * time.Second
	})
	hc := apipb.NewHostServiceClient(ts.tokenConn(t, "wrong-token-0123456789"))
	counts := map[string]int{}
	start := time.Now()
	for range 200 {
		_, err := hc.GetInfo(ctxT(t), &apipb.GetInfoRequest{})
		st := status.Convert(err)
		key := st.Code().String()
		for _, d := range st.Details() {
			if r := reasonOfDetail(d); r != "" {
				key = r
			}
		}
		counts[key]++
	}
	elapsed := time.Since(start)
	checked := counts[ReasonBadToken]
	if checked > defaultFailures+1 || counts[ReasonThrottled]+counts[codes.Unavailable.String()] < 190 {
		t.Fatalf("200 wrong tokens in %s: %v; want at most %d token checks", elapsed, counts, defaultFailures+1)
	}
	if n := logs.lines("api call refused"); n > 2 {
		t.Fatalf("%d refusal log lines for 200 tries, want at most 2:\n%s", n, logs.buf.String())
	}
	t.Logf("200 wrong tokens in %s: %v, %d log lines", elapsed, counts, logs.lines("api call refused"))

	// A new connection of the throttled peer is told why, still without a
	// check: even the right token waits out the backoff.
	_, err := apipb.NewHostServiceClient(ts.tokenConn(t, goodToken)).GetInfo(ctxT(t), &apipb.GetInfoRequest{})
	if st := wantCode(t, err, codes.ResourceExhausted, ReasonThrottled); !strings.Contains(st.Message(), "too many wrong tokens from 127.0.0.1") {
		t.Fatalf("throttled message: %q", st.Message())
	}
	// The unix socket is not throttled.
	if _, err := apipb.NewHostServiceClient(ts.unixConn(t)).GetInfo(ctxT(t), &apipb.GetInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	// Once the backoff ends, the right token works and clears the count.
	good := apipb.NewHostServiceClient(ts.tokenConn(t, goodToken))
	testwait.Until(t, 10*time.Second, "the right token never got through after the backoff", func() bool {
		_, err := good.GetInfo(ctxT(t), &apipb.GetInfoRequest{})
		return err == nil
	})
}

func reasonOfDetail(d any) string {
	type reasoner interface{ GetReason() string }
	if r, ok := d.(reasoner); ok {
		return r.GetReason()
	}
	return ""
}

// TestBackoffGrowsAndPeersAreBounded checks the backoff schedule, its cap,
// the reset on success and the bounded peer table.
func TestBackoffGrowsAndPeersAreBounded(t *testing.T) {
	lim := ListenerLimits{FailuresBeforeBackoff: 3, BackoffBase: time.Second, BackoffMax: 10 * time.Second, MaxPeers: 4}.withDefaults()
	pt := newPeerTable(lim, hclog.NewNullLogger())
	now := time.Unix(1000, 0)
	var got []time.Duration
	for range 10 {
		got = append(got, pt.failed("1.2.3.4", now))
	}
	want := []time.Duration{0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("backoff = %v, want %v", got, want)
	}
	if _, b := pt.blocked("1.2.3.4", now.Add(9*time.Second)); !b {
		t.Fatal("not blocked within its backoff")
	}
	if _, b := pt.blocked("1.2.3.4", now.Add(10*time.Second)); b {
		t.Fatal("still blocked after its backoff")
	}
	pt.succeeded("1.2.3.4")
	if d := pt.failed("1.2.3.4", now); d != 0 {
		t.Fatalf("a good token did not reset the count: %v", d)
	}
	// A full table forgets free peers before throttled ones.
	for range 3 {
		pt.failed("9.9.9.9", now) // throttled at the third
	}
	for i := range 100 {
		pt.failed(fmt.Sprintf("10.0.0.%d", i), now.Add(time.Duration(i)*time.Millisecond))
	}
	if len(pt.peers) > lim.MaxPeers {
		t.Fatalf("%d peers remembered, bound %d", len(pt.peers), lim.MaxPeers)
	}
	if _, b := pt.blocked("9.9.9.9", now.Add(time.Millisecond)); !b {
		t.Fatal("a throttled peer was evicted while free peers were remembered")
	}
}

// TestRefusalLogIsRateLimited: one WARN per peer per interval, then one
// line with the count of those suppressed.
func TestRefusalLogIsRateLimited(t *testing.T) {
	var logs logBuffer
	lim := ListenerLimits{LogInterval: time.Minute}.withDefaults()
	pt := newPeerTable(lim, hclog.New(&hclog.LoggerOptions{Output: &logs}))
	now := time.Unix(1000, 0)
	pt.now = func() time.Time { return now }
	for range 1000 {
		pt.refused("uid 4242", "api call refused")
	}
	pt.refused("uid 7", "api call refused")
	if n := logs.lines("api call refused"); n != 2 {
		t.Fatalf("%d lines for 1000 refusals of one peer and one of another, want 2", n)
	}
	now = now.Add(time.Minute)
	pt.refused("uid 4242", "api call refused")
	if n := logs.lines("suppressed=999"); n != 1 {
		t.Fatalf("the next line does not count the 999 suppressed:\n%s", logs.buf.String())
	}
}

// TestOversizedHeaderIsResetUnprocessed sends a 1 MiB authorization header
// over raw HTTP/2, as a hostile client would (a gRPC client refuses to send
// it). The stream is reset by the transport: the authenticator and the
// backend never see it. A header list just under the bound is served.
func TestOversizedHeaderIsResetUnprocessed(t *testing.T) {
	var logs logBuffer
	ts := startServer(t, withLog(&logs))

	// At the bound: 7 KiB of metadata, the right token.
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-pad", strings.Repeat("p", 7<<10))
	if _, err := apipb.NewHostServiceClient(ts.tokenConn(t, goodToken)).GetInfo(ctx, &apipb.GetInfoRequest{}); err != nil {
		t.Fatalf("a 7 KiB header list was refused: %v", err)
	}

	// Control: the same raw client with a short token gets an answer.
	if frame, err, sendErr := rawHTTP2Call(t, ts.tcpAddr, 16); frame != "HEADERS" {
		t.Fatalf("raw call with a short token: %q %v (send: %v)", frame, err, sendErr)
	}
	if n := logs.lines("ListTasks"); n != 1 {
		t.Fatalf("the control call was not refused by the authenticator:\n%s", logs.buf.String())
	}
	frame, err, sendErr := rawHTTP2Call(t, ts.tcpAddr, 1<<20)
	switch {
	case strings.HasPrefix(frame, "RST_STREAM"), strings.HasPrefix(frame, "GOAWAY"):
	case frame == "" && err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		// The server dropped the connection (EOF or reset).
	default:
		t.Fatalf("1 MiB header: got %q / %v (send: %v), want a reset", frame, err, sendErr)
	}
	if ts.fake.calls != 0 {
		t.Fatalf("the backend was called %d times", ts.fake.calls)
	}
	if n := logs.lines("ListTasks"); n != 1 {
		t.Fatalf("the oversized call reached the interceptor:\n%s", logs.buf.String())
	}
	t.Logf("1 MiB header list: %q %v (send: %v)", frame, err, sendErr)
	// The server is still there for everyone else.
	if _, err := apipb.NewHostServiceClient(ts.unixConn(t)).GetInfo(context.Background(), &apipb.GetInfoRequest{}); err != nil {
		t.Fatal(err)
	}
}

// rawHTTP2Call sends one ListTasks call over raw HTTP/2 with an
// authorization header of tokenLen bytes and returns the server's first
// answer to it: "HEADERS", "RST_STREAM <code>", "GOAWAY <code>", or "" and
// the read error; sendErr is the error of sending, if any.
func rawHTTP2Call(t *testing.T, addr string, tokenLen int) (frame string, err, sendErr error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(c, c)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/taskhost.api.v1.TaskService/ListTasks"},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"},
		{"authorization", "Bearer " + strings.Repeat("A", tokenLen)},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	// The server answers while the header is still being sent: read
	// concurrently, or both sides block on full socket buffers.
	type result struct {
		frame string
		err   error
	}
	got := make(chan result, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				got <- result{"", err}
				return
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				got <- result{"RST_STREAM " + f.ErrCode.String(), nil}
				return
			case *http2.GoAwayFrame:
				got <- result{"GOAWAY " + f.ErrCode.String(), nil}
				return
			case *http2.HeadersFrame:
				got <- result{"HEADERS", nil}
				return
			}
		}
	}()
	send := func() error {
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			return err
		}
		if err := fr.WriteSettings(); err != nil {
			return err
		}
		b := block.Bytes()
		const chunk = 16 << 10
		n := min(chunk, len(b))
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:n], EndHeaders: n == len(b)}); err != nil {
			return err
		}
		for b = b[n:]; len(b) > 0; b = b[n:] {
			n = min(chunk, len(b))
			if err := fr.WriteContinuation(1, n == len(b), b[:n]); err != nil {
				return err
			}
		}
		// An empty request message: gRPC reads it before the interceptor.
		return fr.WriteData(1, true, []byte{0, 0, 0, 0, 0})
	}
	sendErr = send()
	r := <-got
	return r.frame, r.err, sendErr
}

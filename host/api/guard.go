package api

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/net/netutil"
)

// ListenerLimits bound what an unauthenticated caller of the TCP token
// listener can cost the daemon: file descriptors, goroutines, memory for
// headers, token checks and log lines.
type ListenerLimits struct {
	// MaxConns bounds concurrent TCP connections (default 64). Beyond it the
	// listener stops accepting: new connections wait in the kernel's backlog
	// and hold no descriptor of the daemon.
	MaxConns int
	// FirstRequestTimeout closes a connection that has made no
	// authenticated call this long after it was accepted (default 5 s).
	FirstRequestTimeout time.Duration
	// FailuresBeforeBackoff is the number of wrong tokens from one peer
	// address that throttles it (default 5).
	FailuresBeforeBackoff int
	// BackoffBase is the first throttle interval; each further wrong token
	// doubles it, up to BackoffMax (defaults 1 s and 5 min).
	BackoffBase, BackoffMax time.Duration
	// MaxPeers bounds the peers remembered for backoff and log limiting
	// (default 1024); the least recently seen is forgotten first.
	MaxPeers int
	// LogInterval is the shortest interval between two refusal WARN lines
	// about one peer (default 1 min); the lines in between are counted.
	LogInterval time.Duration
}

// Defaults of ListenerLimits.
const (
	DefaultMaxConns            = 64
	DefaultFirstRequestTimeout = 5 * time.Second
	defaultFailures            = 5
	defaultBackoffBase         = time.Second
	defaultBackoffMax          = 5 * time.Minute
	defaultMaxPeers            = 1024
	defaultLogInterval         = time.Minute
)

// maxHeaderListBytes bounds the HTTP/2 header list (gRPC metadata) of a
// call, as hpack counts it. A larger one is reset before any of it reaches
// the authenticator. A bearer token is at most maxTokenBytes.
const maxHeaderListBytes = 8 << 10

func (l ListenerLimits) withDefaults() ListenerLimits {
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&l.MaxConns, DefaultMaxConns)
	setD(&l.FirstRequestTimeout, DefaultFirstRequestTimeout)
	set(&l.FailuresBeforeBackoff, defaultFailures)
	setD(&l.BackoffBase, defaultBackoffBase)
	setD(&l.BackoffMax, defaultBackoffMax)
	set(&l.MaxPeers, defaultMaxPeers)
	setD(&l.LogInterval, defaultLogInterval)
	return l
}

// guardListener wraps the TCP listener: a connection cap and a deadline
// for the first authenticated call. A throttled peer still connects, so
// that it is told why it is refused (the authenticator refuses it before
// any token check); the cap and the deadline bound what its connections
// hold.
type guardListener struct {
	net.Listener
	timeout time.Duration
}

func newGuardListener(ln net.Listener, lim ListenerLimits) net.Listener {
	return &guardListener{Listener: netutil.LimitListener(ln, lim.MaxConns), timeout: lim.FirstRequestTimeout}
}

func (g *guardListener) Accept() (net.Conn, error) {
	c, err := g.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &guardConn{Conn: c}
	gc.timer = time.AfterFunc(g.timeout, func() {
		if !gc.authenticated.Load() {
			gc.Close()
		}
	})
	return gc, nil
}

// guardConn is an accepted TCP connection. It is closed at its first-request
// deadline unless a call on it has been authenticated by then.
type guardConn struct {
	net.Conn
	timer         *time.Timer
	authenticated atomic.Bool
}

func (c *guardConn) Close() error {
	c.timer.Stop()
	return c.Conn.Close()
}

// peerKey is the address the backoff is keyed on: the peer's IP (its port
// changes with every connection).
func peerKey(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	return ap.Addr().Unmap().String()
}

// peerTable remembers, for a bounded number of peers, their wrong tokens
// and their last refusal log line.
type peerTable struct {
	lim ListenerLimits
	log hclog.Logger
	now func() time.Time

	mu    sync.Mutex
	peers map[string]*peerState
}

type peerState struct {
	fails      int       // wrong tokens since the last good one
	until      time.Time // refused before any check until then
	lastSeen   time.Time
	lastLog    time.Time
	suppressed int // refusals not logged since lastLog
}

func newPeerTable(lim ListenerLimits, log hclog.Logger) *peerTable {
	return &peerTable{lim: lim, log: log, now: time.Now, peers: map[string]*peerState{}}
}

// get returns key's state, making room for it if the table is full. The
// caller holds mu.
func (t *peerTable) get(key string, now time.Time) *peerState {
	if p, ok := t.peers[key]; ok {
		p.lastSeen = now
		return p
	}
	if len(t.peers) >= t.lim.MaxPeers {
		t.evict(now)
	}
	p := &peerState{lastSeen: now}
	t.peers[key] = p
	return p
}

// evict forgets one peer: one whose throttle has ended if any, else the
// least recently seen. O(MaxPeers), only when the table is full.
func (t *peerTable) evict(now time.Time) {
	victim, free := "", false
	var oldest time.Time
	for k, p := range t.peers {
		isFree := !now.Before(p.until)
		switch {
		case victim == "",
			isFree && !free,
			isFree == free && p.lastSeen.Before(oldest):
			victim, free, oldest = k, isFree, p.lastSeen
		}
	}
	delete(t.peers, victim)
}

// blocked reports whether key is throttled at now, and until when.
func (t *peerTable) blocked(key string, now time.Time) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.peers[key]
	if !ok || !now.Before(p.until) {
		return time.Time{}, false
	}
	return p.until, true
}

// failed records a wrong token from key and returns how long key is now
// throttled for: 0 for the first FailuresBeforeBackoff-1, then BackoffBase,
// doubling with each further one.
func (t *peerTable) failed(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.get(key, now)
	p.fails++
	over := p.fails - t.lim.FailuresBeforeBackoff + 1
	if over <= 0 {
		return 0
	}
	d := t.lim.BackoffMax
	if over <= 30 {
		d = min(t.lim.BackoffBase<<(over-1), t.lim.BackoffMax)
	}
	p.until = now.Add(d)
	return d
}

// succeeded forgets key's wrong tokens.
func (t *peerTable) succeeded(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[key]; ok {
		p.fails, p.until = 0, time.Time{}
	}
}

// refused logs a refusal of key at WARN, at most once per LogInterval; the
// refusals in between are counted and reported with the next line.
func (t *peerTable) refused(key, msg string, args ...any) {
	now := t.now()
	t.mu.Lock()
	p := t.get(key, now)
	if !p.lastLog.IsZero() && now.Sub(p.lastLog) < t.lim.LogInterval {
		p.suppressed++
		t.mu.Unlock()
		return
	}
	suppressed := p.suppressed
	p.lastLog, p.suppressed = now, 0
	t.mu.Unlock()
	args = append(args, "peer", key)
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed, "suppressed_over", fmt.Sprint(t.lim.LogInterval))
	}
	t.log.Warn(msg, args...)
}

package config

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
)

// API is the [api] section: how `taskhost serve` is reached.
//
// The unix socket <data-dir>/taskhost.sock is always served; its callers are
// identified by their uid (peer credentials) through [principals]. The TCP
// listener is off unless TCPListen is set, accepts only loopback addresses and
// identifies its callers by bearer token.
type API struct {
	// Admins are principal names (of [principals] or [api.tokens]) that
	// may list, cancel and resume every principal's tasks; each such act
	// on another's task is recorded in that task's events. At most 100;
	// default none.
	Admins []string `toml:"admins"`
	// SocketGroup, when set, lets the members of this group (a name or a
	// numeric gid) reach the socket: the data dir becomes 0710 and the
	// socket 0660, both owned by the group. Empty (the default) keeps the
	// data dir 0700 and the socket 0600: only the daemon's own user (and
	// root) can connect. A caller still needs a [principals] entry.
	SocketGroup string `toml:"socket_group"`
	// TCPListen is "IP:PORT" of the optional token listener, a loopback
	// IP only (127.0.0.0/8 or ::1); empty (the default) means off.
	TCPListen string `toml:"tcp_listen"`
	// MetricsListen is "IP:PORT" of the optional HTTP listener that serves
	// /metrics (Prometheus text) and /healthz, a loopback IP only: it has
	// no authentication. Empty (the default) means off.
	MetricsListen string `toml:"metrics_listen"`
	// Tokens maps a principal name to the SHA-256 (64 lowercase hex) of its
	// bearer token: [api.tokens] NAME = "<sha256 hex>". The token itself
	// never appears in the config; `taskhost token hash` prints the hash.
	Tokens map[string]string `toml:"tokens"`
	// MaxConnections bounds concurrent connections to the TCP listener:
	// 1..4096, default 64. Beyond it connections wait in the kernel's
	// backlog, holding no descriptor of the daemon.
	MaxConnections int `toml:"max_connections"`
	// FirstRequestTimeoutSeconds closes a TCP connection that has made no
	// authenticated call this long after it was accepted: 1..60, default 5.
	FirstRequestTimeoutSeconds int `toml:"first_request_timeout_seconds"`
	// MaxWatchesPerPrincipal bounds one principal's open watch streams, of
	// the daemon's 256: 1..256, default 32.
	MaxWatchesPerPrincipal int `toml:"max_watches_per_principal"`
}

// Principals is the [principals] section: unix uid (a decimal string key) →
// principal name, e.g. "1000" = "alice". The daemon's own uid maps to its
// user name unless it is listed here.
type Principals map[string]string

var (
	principalNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$`)
	groupNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$`)
)

// maxPrincipals bounds [principals] and [api.tokens] alike.
const maxPrincipals = 1000

// maxAdmins bounds api.admins.
const maxAdmins = 100

func (a API) validate(ps *problems) {
	ps.intRange("api.max_connections", a.MaxConnections, 1, 4096)
	ps.intRange("api.first_request_timeout_seconds", a.FirstRequestTimeoutSeconds, 1, 60)
	ps.intRange("api.max_watches_per_principal", a.MaxWatchesPerPrincipal, 1, 256)
	if a.SocketGroup != "" && !groupNameRE.MatchString(a.SocketGroup) {
		if _, err := strconv.ParseUint(a.SocketGroup, 10, 32); err != nil {
			ps.add("api.socket_group", "api.socket_group = %s: must be a group name or a numeric gid", quote(a.SocketGroup))
		}
	}
	if a.TCPListen != "" {
		if err := checkLoopback(a.TCPListen); err != nil {
			ps.add("api.tcp_listen", "api.tcp_listen = %s: %v", quote(a.TCPListen), err)
		}
	} else if len(a.Tokens) > 0 {
		ps.add("api.tokens", "api.tokens is set but api.tcp_listen is empty: tokens are only used by the TCP listener; set api.tcp_listen = \"127.0.0.1:7468\" or remove the tokens")
	}
	if a.MetricsListen != "" {
		if err := checkLoopback(a.MetricsListen); err != nil {
			ps.add("api.metrics_listen", "api.metrics_listen = %s: %v", quote(a.MetricsListen), err)
		}
	}
	if len(a.Admins) > maxAdmins {
		ps.add("api.admins", "api.admins has %d entries: at most %d are allowed", len(a.Admins), maxAdmins)
	}
	for i, name := range a.Admins {
		if !principalNameRE.MatchString(name) {
			ps.add("api.admins", "api.admins[%d] = %s: invalid principal name: 1 to 64 characters, letters, digits, '_', '.', '@' or '-'", i, quote(name))
		}
	}
	if len(a.Tokens) > maxPrincipals {
		ps.add("api.tokens", "api.tokens has %d entries: at most %d are allowed", len(a.Tokens), maxPrincipals)
	}
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(a.Tokens)) {
		key := keyString("api", "tokens", name)
		h := a.Tokens[name]
		if !principalNameRE.MatchString(name) {
			ps.add(key, "%s: invalid principal name %s: 1 to 64 characters, letters, digits, '_', '.', '@' or '-'", key, quote(name))
		}
		if !sha256RE.MatchString(h) {
			ps.add(key, "%s: must be the SHA-256 of the token, 64 lowercase hexadecimal characters (print it with `taskhost token hash`); never the token itself", key)
			continue
		}
		if other, ok := seen[h]; ok {
			ps.add(key, "%s: the same token hash as api.tokens.%s: each principal needs its own token", key, other)
		}
		seen[h] = name
	}
}

// checkLoopback accepts "IP:PORT" with a loopback IP literal.
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be IP:PORT, e.g. \"127.0.0.1:7468\" (%v)", err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %s: must be a number 0..65535", quote(port))
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%s is not an IP address: give a loopback IP such as 127.0.0.1 or ::1 (host names are refused)", quote(host))
	}
	if !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address: the listener has no TLS, so it only listens on 127.0.0.0/8 or ::1", ip)
	}
	return nil
}

// CheckLoopback reports whether addr ("IP:PORT") is a loopback address the
// token listener may use. The daemon checks the address it actually bound.
func CheckLoopback(addr string) error { return checkLoopback(addr) }

func (p Principals) validate(ps *problems) {
	if len(p) > maxPrincipals {
		ps.add("principals", "principals has %d entries: at most %d are allowed", len(p), maxPrincipals)
	}
	for _, uid := range slices.Sorted(maps.Keys(p)) {
		key := keyString("principals", uid)
		if n, err := strconv.ParseUint(uid, 10, 32); err != nil || strconv.FormatUint(n, 10) != uid {
			ps.add(key, "%s: the key must be a numeric uid in decimal, e.g. \"1000\" = \"alice\"", key)
		}
		if name := p[uid]; !principalNameRE.MatchString(name) {
			ps.add(key, "%s = %s: invalid principal name: 1 to 64 characters, letters, digits, '_', '.', '@' or '-'", key, quote(name))
		}
	}
}

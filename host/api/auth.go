package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/taskhost/taskhost/internal/uids"
	"net"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/internal/confine"
)

// maxTokenBytes bounds a presented bearer token before it is hashed.
const maxTokenBytes = 512

// PeerCred is the AuthInfo of a unix socket connection: the peer's
// credentials as the kernel reported them when it connected (SO_PEERCRED).
type PeerCred struct {
	credentials.CommonAuthInfo
	UID, GID uint32
	PID      int32
	// Confined: the peer carries the marks of a process the host confined
	// (a plugin, a shell.run command, or any descendant of one). Without a
	// uid of its own it runs as the daemon's uid, which is a principal, so
	// without this it could use the API as the daemon's user.
	Confined bool
}

// AuthType implements credentials.AuthInfo.
func (PeerCred) AuthType() string { return "peercred" }

// tokenConn is the AuthInfo of a loopback TCP connection: its calls must
// each carry a bearer token. conn is nil for a connection that did not come
// through a guardListener.
type tokenConn struct {
	credentials.CommonAuthInfo
	conn *guardConn
}

func (tokenConn) AuthType() string { return "bearer" }

// transportCredentials records who is at the other end of each accepted
// connection. It adds no encryption: the unix socket is local, and the TCP
// listener accepts only loopback addresses.
type transportCredentials struct{}

func (transportCredentials) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	switch conn := c.(type) {
	case *net.UnixConn:
		pc, err := peerCred(conn)
		if err != nil {
			return nil, nil, err
		}
		return c, pc, nil
	case *guardConn:
		return c, tokenConn{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, conn: conn}, nil
	case *net.TCPConn:
		return c, tokenConn{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
	}
	return nil, nil, fmt.Errorf("api: unsupported connection type %T", c)
}

func (transportCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("api: server-side credentials only")
}

func (transportCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "taskhost-local"}
}

func (t transportCredentials) Clone() credentials.TransportCredentials { return t }

func (transportCredentials) OverrideServerName(string) error { return nil }

// peerCred reads the peer's credentials of a connected unix socket.
func peerCred(conn *net.UnixConn) (PeerCred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return PeerCred{}, fmt.Errorf("api: peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, fmt.Errorf("api: peer credentials: %w", err)
	}
	if credErr != nil {
		return PeerCred{}, fmt.Errorf("api: peer credentials: %w", credErr)
	}
	// Read at the handshake: the pid is the connecting process's now.
	confined, err := confine.Marked(int(cred.Pid))
	if err != nil {
		return PeerCred{}, fmt.Errorf("api: peer %d: %w", cred.Pid, err)
	}
	return PeerCred{
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
		UID:            cred.Uid, GID: cred.Gid, PID: cred.Pid, Confined: confined,
	}, nil
}

// authenticator maps a caller to its principal.
type authenticator struct {
	uids map[uint32]string
	// sandbox are the uids of the daemon's untrusted processes, refused
	// by uid: a process cannot change its uid without privileges it
	// never has, whatever namespaces it makes.
	sandbox uids.Range
	tokens  []tokenEntry
	// peers throttles TCP peers that send wrong tokens and rate-limits
	// the refusal log of every peer.
	peers *peerTable
}

type tokenEntry struct {
	principal string
	sum       []byte // SHA-256 of the token
}

func newAuthenticator(principals map[uint32]string, tokens map[string]string, sandbox uids.Range, peers *peerTable) (*authenticator, error) {
	a := &authenticator{uids: map[uint32]string{}, sandbox: sandbox, peers: peers}
	for uid, name := range principals {
		if name == "" {
			return nil, fmt.Errorf("api: uid %d maps to an empty principal", uid)
		}
		if sandbox.Contains(int(uid)) {
			return nil, fmt.Errorf("api: principal %q is uid %d, inside the range the daemon runs untrusted commands under (%s): map another uid, or move [confinement] uid_first", name, uid, sandbox)
		}
		a.uids[uid] = name
	}
	for name, h := range tokens {
		sum, err := hex.DecodeString(h)
		if err != nil || len(sum) != sha256.Size || name == "" {
			return nil, fmt.Errorf("api: token of principal %q: want the 64-hex-digit SHA-256 of the token", name)
		}
		a.tokens = append(a.tokens, tokenEntry{principal: name, sum: sum})
	}
	return a, nil
}

// principalKey is the context key of the authenticated principal.
type principalKey struct{}

// Principal returns the principal a call was authenticated as.
func Principal(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok && p != ""
}

// caller is who is calling, for logs: who names the connection, key is
// what refusals are counted under (a uid, or a TCP peer's IP).
type caller struct{ who, key string }

// authenticate returns the principal of the call in ctx, or the refusal.
// It is the only place the API decides who a caller is.
func (a *authenticator) authenticate(ctx context.Context) (string, caller, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", caller{"unknown", "unknown"}, statusError(codes.Unauthenticated, ReasonBadToken, "no peer information")
	}
	switch info := p.AuthInfo.(type) {
	case PeerCred:
		c := caller{who: fmt.Sprintf("uid %d (pid %d)", info.UID, info.PID), key: fmt.Sprintf("uid %d", info.UID)}
		if a.sandbox.Contains(int(info.UID)) {
			return "", c, statusError(codes.PermissionDenied, ReasonUnknownPeer, fmt.Sprintf(
				"uid %d is one the daemon runs untrusted commands under (a shell.run command or a process it started): it may not call the API", info.UID))
		}
		if info.Confined {
			return "", c, statusError(codes.PermissionDenied, ReasonUnknownPeer, fmt.Sprintf(
				"pid %d is a process the daemon confined (a plugin or a shell.run command): it may not call the API", info.PID))
		}
		name, ok := a.uids[info.UID]
		if !ok {
			return "", c, statusError(codes.PermissionDenied, ReasonUnknownPeer, fmt.Sprintf(
				"uid %d is not a taskhost principal of this daemon: add `\"%d\" = \"NAME\"` to the [principals] section of the daemon's config and restart it",
				info.UID, info.UID))
		}
		return name, c, nil
	case tokenConn:
		c := caller{who: "tcp " + p.Addr.String(), key: peerKey(p.Addr)}
		now := a.peers.now()
		// A throttled peer is refused before its token is looked at.
		if until, blocked := a.peers.blocked(c.key, now); blocked {
			return "", c, statusError(codes.ResourceExhausted, ReasonThrottled, fmt.Sprintf(
				"too many wrong tokens from %s: refused without a check for another %s", c.key, until.Sub(now).Round(time.Millisecond)))
		}
		name, ok := a.token(ctx)
		if !ok {
			a.peers.failed(c.key, now)
			return "", c, statusError(codes.Unauthenticated, ReasonBadToken,
				"missing or invalid bearer token: send `authorization: Bearer <token>` with a token whose SHA-256 is in the daemon's [api.tokens]")
		}
		a.peers.succeeded(c.key)
		if info.conn != nil {
			info.conn.authenticated.Store(true)
		}
		return name, c, nil
	}
	return "", caller{"unknown", "unknown"}, statusError(codes.Unauthenticated, ReasonBadToken, "unsupported transport")
}

// token matches the call's bearer token against every configured hash, in
// time that does not depend on which one (if any) matches.
func (a *authenticator) token(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return "", false
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok || tok == "" || len(tok) > maxTokenBytes {
		return "", false
	}
	sum := sha256.Sum256([]byte(tok))
	found := ""
	for _, e := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], e.sum) == 1 {
			found = e.principal
		}
	}
	return found, found != ""
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	principal, c, err := s.auth.authenticate(ctx)
	if err != nil {
		s.auth.peers.refused(c.key, "api call refused", "method", info.FullMethod, "caller", c.who, "code", status.Code(err))
		return nil, err
	}
	if s.stopping() {
		return nil, errClosing()
	}
	resp, err := handler(context.WithValue(ctx, principalKey{}, principal), req)
	s.log.Debug("api call", "method", info.FullMethod, "principal", principal, "code", status.Code(err), "duration", time.Since(start))
	return resp, err
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	principal, c, err := s.auth.authenticate(ss.Context())
	if err != nil {
		s.auth.peers.refused(c.key, "api call refused", "method", info.FullMethod, "caller", c.who, "code", status.Code(err))
		return err
	}
	if s.stopping() {
		return errClosing()
	}
	err = handler(srv, &principalStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), principalKey{}, principal)})
	s.log.Debug("api stream", "method", info.FullMethod, "principal", principal, "code", status.Code(err), "duration", time.Since(start))
	return err
}

// principalStream carries the authenticated principal in its context.
type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (p *principalStream) Context() context.Context { return p.ctx }

// principalOf returns the principal the interceptor put in ctx. A handler
// reached without one is a programming error: refuse rather than guess.
func principalOf(ctx context.Context) (string, error) {
	p, ok := Principal(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "unauthenticated")
	}
	return p, nil
}

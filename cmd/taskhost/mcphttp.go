package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of the streamable HTTP listener.
const (
	mcpHTTPPath          = "/mcp"
	mcpMaxTokenBytes     = 512 // the API's bound on a bearer token
	mcpReadHeaderTimeout = 5 * time.Second
	mcpMaxHeaderBytes    = 8 << 10 // the API's header bound
)

// callerToken is the key of the HTTP caller's bearer token in a context.
type callerToken struct{}

// callerBearer sends, with each call to the daemon, the token of the HTTP
// request the call is made for: the daemon, not taskhost mcp, decides
// whose principal that is.
type callerBearer struct{}

func (callerBearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, _ := ctx.Value(callerToken{}).(string)
	if tok == "" {
		return nil, errors.New("no bearer token for this call")
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (callerBearer) RequireTransportSecurity() bool { return false }

// bearerToken is the token of an Authorization header, or "".
func bearerToken(h http.Header) string {
	v := h.Get("Authorization")
	tok, ok := strings.CutPrefix(v, "Bearer ")
	if !ok || len(tok) > mcpMaxTokenBytes || strings.TrimSpace(tok) != tok {
		return ""
	}
	return tok
}

// withCaller is ctx carrying the bearer token of the HTTP request extra
// describes (none over stdio).
func withCaller(ctx context.Context, extra *mcp.RequestExtra) context.Context {
	if extra == nil || extra.Header == nil {
		return ctx
	}
	return context.WithValue(ctx, callerToken{}, bearerToken(extra.Header))
}

// checkLoopback refuses a listen address that is not a loopback IP.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--http %q: listens only on a loopback IP (127.0.0.1, ::1)", addr)
	}
	return nil
}

// serveMCPHTTP serves m as streamable HTTP at http://addr/mcp until ctx
// ends. Every request must carry a bearer token of the daemon's token
// listener, which each call to the daemon presents as its own: one
// listener serves each caller as the principal of its token.
func serveMCPHTTP(ctx context.Context, e *env, m *mcpServer, addr string) error {
	srv := m.server()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, MaxRequestBodyBytes: mcpMaxMessageBytes})
	mux := http.NewServeMux()
	mux.Handle(mcpHTTPPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bearerToken(r.Header) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskhost"`)
			http.Error(w, "taskhost mcp: send Authorization: Bearer TOKEN, a token of the daemon's [api.tokens]", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: mcpReadHeaderTimeout, MaxHeaderBytes: mcpMaxHeaderBytes}
	fmt.Fprintf(e.stderr, "taskhost mcp: serving streamable HTTP on http://%s%s\n", ln.Addr(), mcpHTTPPath)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		hs.Shutdown(sctx) //nolint:errcheck // stopping: what is left is cut
		return nil
	}
}

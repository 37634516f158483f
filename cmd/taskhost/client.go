package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/api"
)

// maxTokenFileBytes bounds a token file.
const maxTokenFileBytes = 4096

// clientFlags are the flags of every command that talks to a daemon.
type clientFlags struct {
	dataDir   string
	socket    string
	address   string
	tokenFile string
	json      bool
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.dataDir, "data-dir", defaultDataDir(), "the daemon's data directory: its socket is DATA-DIR/"+api.SocketName+"; env TASKHOST_DATA_DIR")
	fs.StringVar(&c.socket, "socket", os.Getenv("TASKHOST_SOCKET"), "the daemon's unix socket (default: in --data-dir); env TASKHOST_SOCKET")
	fs.StringVar(&c.address, "address", os.Getenv("TASKHOST_ADDRESS"), "IP:PORT of the daemon's loopback token listener instead of the socket; the token comes from --token-file or env TASKHOST_TOKEN; env TASKHOST_ADDRESS")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token for --address (default: env TASKHOST_TOKEN)")
	fs.BoolVar(&c.json, "json", false, "print JSON (see docs/cli.md for the shapes)")
}

// target describes where the client connects, for messages.
func (c *clientFlags) target() string {
	if c.address != "" {
		return "tcp " + c.address
	}
	return "unix socket " + c.socketPath()
}

func (c *clientFlags) socketPath() string {
	if c.socket != "" {
		return c.socket
	}
	return api.SocketPath(c.dataDir)
}

// dial returns a connection to the daemon. It does not wait for the daemon:
// the first call fails with Unavailable if there is none.
func (c *clientFlags) dial() (*grpc.ClientConn, error) {
	var creds credentials.PerRPCCredentials
	if c.address != "" {
		tok, err := c.token()
		if err != nil {
			return nil, err
		}
		creds = bearer(tok)
	}
	return c.dialWith(creds)
}

// dialWith is dial with creds, the credentials of every call on --address.
func (c *clientFlags) dialWith(creds credentials.PerRPCCredentials) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
		// Reconnect quickly when the daemon comes back.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}
	var target string
	if c.address != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(creds))
		target = "passthrough:///" + c.address
	} else {
		path, err := filepath.Abs(c.socketPath())
		if err != nil {
			return nil, err
		}
		target = "unix://" + path
	}
	return grpc.NewClient(target, opts...)
}

// token reads the bearer token for --address.
func (c *clientFlags) token() (string, error) {
	if c.tokenFile == "" {
		tok := strings.TrimSpace(os.Getenv("TASKHOST_TOKEN"))
		if tok == "" {
			return "", usageError("--address needs a token: set TASKHOST_TOKEN or pass --token-file")
		}
		return tok, nil
	}
	data, err := readInputFile("--token-file", c.tokenFile, maxTokenFileBytes)
	if err != nil {
		return "", usageError(err.Error())
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", usageError("--token-file " + c.tokenFile + " is empty")
	}
	return tok, nil
}

// bearer sends a token with every call. The token listener is loopback
// only, so it is sent without TLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// usageError is a problem with the command line (exit 2).
type usageError string

func (u usageError) Error() string { return string(u) }

// callTimeout bounds a unary call.
const callTimeout = 30 * time.Second

// errorView is the JSON shape of a failure with --json (on stderr).
type errorView struct {
	Error struct {
		Code    string `json:"code"`
		Reason  string `json:"reason,omitempty"`
		Field   string `json:"field,omitempty"`
		Message string `json:"message"`
	} `json:"error"`
	ExitCode int `json:"exit_code"`
}

// exitCodeForStatus maps an API error to the documented exit codes.
func exitCodeForStatus(err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.OK:
		return exitOK
	case codes.Canceled:
		return exitSignal // a client's calls are cancelled only by SIGINT or SIGTERM
	case codes.InvalidArgument:
		return exitUsage
	case codes.NotFound:
		return exitNotFound
	case codes.FailedPrecondition:
		switch reasonOf(st) {
		case api.ReasonExecutorUnavailable, api.ReasonTasksDisabled, api.ReasonWorkspaceUntrusted:
			return exitUnavailable
		}
		return exitConflict
	case codes.ResourceExhausted:
		if reasonOf(st) == api.ReasonThrottled {
			return exitDenied // wrong tokens from this address: a refused caller
		}
		return exitConflict
	case codes.Aborted, codes.AlreadyExists:
		return exitConflict
	case codes.PermissionDenied, codes.Unauthenticated:
		return exitDenied
	default:
		return exitUnavailable
	}
}

func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason
		}
	}
	return ""
}

func fieldOf(st *status.Status) string {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.FieldViolations) > 0 {
			return br.FieldViolations[0].Field
		}
	}
	return ""
}

// fail reports err (as text, or JSON on stderr with --json) and returns the
// exit code.
func (c *clientFlags) fail(e *env, err error) int {
	v := c.errorViewOf(err)
	if c.json {
		data, _ := json.Marshal(v)
		fmt.Fprintln(e.stderr, string(data))
		e.jsonFailed = true
		return v.ExitCode
	}
	errorf(e, "%s", v.Error.Message)
	return v.ExitCode
}

// errorViewOf is what a client says of err: its code, the API's reason and
// field, a message for a person and the exit code. `taskhost mcp` returns
// the same view as a tool error.
func (c *clientFlags) errorViewOf(err error) errorView {
	code := exitCodeForStatus(err)
	msg := err.Error()
	var ue usageError
	st, isStatus := status.FromError(err)
	if isStatus && !errors.As(err, &ue) {
		msg = st.Message()
		switch st.Code() {
		case codes.Unavailable:
			if reasonOf(st) == "" { // the daemon is not there at all
				msg = fmt.Sprintf("no taskhost daemon answers on %s (%s): start one with 'taskhost serve --data-dir %s', or point --data-dir/--socket/--address at it",
					c.target(), st.Message(), c.dataDir)
			}
		case codes.DeadlineExceeded:
			msg = fmt.Sprintf("the daemon on %s did not answer in time (%s)", c.target(), st.Message())
		}
	}
	var v errorView
	v.Error.Code = strings.ToLower(codeName(err))
	v.Error.Message = msg
	if isStatus {
		v.Error.Reason, v.Error.Field = reasonOf(st), fieldOf(st)
	}
	v.ExitCode = code
	return v
}

func codeName(err error) string {
	var ue usageError
	if errors.As(err, &ue) {
		return "usage"
	}
	return toSnake(status.Code(err).String())
}

// toSnake turns "NotFound" into "not_found".
func toSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

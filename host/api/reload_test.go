package api

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// reloadCounter is an ExecutorReloader that counts its calls and fails
// with err.
type reloadCounter struct {
	calls int
	err   error
}

func (r *reloadCounter) ReloadExecutors(context.Context) error {
	r.calls++
	return r.err
}

// Only an admin or the daemon's own user on the unix socket may reload;
// a failed reload is INVALID_ARGUMENT; no reloader is UNIMPLEMENTED.
func TestReloadExecutors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reloader  *reloadCounter
		admins    []string
		token     bool // call over the token listener as tokenUser
		wantCode  codes.Code
		wantCalls int
	}{
		{name: "the daemon's own user on the socket", reloader: &reloadCounter{}, wantCode: codes.OK, wantCalls: 1},
		{name: "a token principal", reloader: &reloadCounter{}, token: true, wantCode: codes.PermissionDenied},
		{name: "a token admin", reloader: &reloadCounter{}, token: true, admins: []string{tokenUser}, wantCode: codes.OK, wantCalls: 1},
		{name: "a config that does not load", reloader: &reloadCounter{err: errors.New("config: bad key")}, wantCode: codes.InvalidArgument, wantCalls: 1},
		{name: "no reloader", wantCode: codes.Unimplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, func(o *Options) {
				if tc.reloader != nil {
					o.Reloader = tc.reloader
				}
				o.Admins, o.AdminActs = tc.admins, &fakeAdmin{f: o.Tasks.(*fakeTasks)}
			})
			conn := ts.unixConn(t)
			if tc.token {
				conn = ts.tokenConn(t, goodToken)
			}
			resp, err := apipb.NewHostServiceClient(conn).ReloadExecutors(ctxT(t), &apipb.ReloadExecutorsRequest{})
			if tc.wantCode == codes.OK {
				if err != nil || len(resp.Executors) != 2 {
					t.Fatalf("reload: %v, %d executors; want the 2 listed", err, len(resp.GetExecutors()))
				}
			} else {
				wantCode(t, err, tc.wantCode, "")
			}
			if tc.reloader != nil && tc.reloader.calls != tc.wantCalls {
				t.Errorf("reloader called %d times, want %d", tc.reloader.calls, tc.wantCalls)
			}
		})
	}
}

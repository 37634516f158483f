package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/taskhost/taskhost/internal/uids"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

const (
	goodToken = "token-of-the-ci-principal-0123456789"
	self      = "me"
	tokenUser = "ci"
)

func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// testServer is a Server over a fake backend on a real unix socket and a
// real loopback TCP listener.
type testServer struct {
	srv     *Server
	fake    *fakeTasks
	dataDir string
	tcpAddr string
}

type serverOpt func(*Options)

func startServer(t *testing.T, opts ...serverOpt) *testServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "api") // short: socket paths are capped
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fake := newFake()
	o := Options{
		Tasks: fake, Events: fakeEvents{fake}, Executors: fakeExecutors{},
		Principals:      map[uint32]string{uint32(os.Getuid()): self},
		Tokens:          map[string]string{tokenUser: tokenHash(goodToken)},
		DefaultExecutor: "testexec", Version: "test",
	}
	for _, opt := range opts {
		opt(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := ListenUnix(dir, -1)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(ln)
	srv.Serve(tl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	return &testServer{srv: srv, fake: fake, dataDir: dir, tcpAddr: tl.Addr().String()}
}

func dial(t *testing.T, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (ts *testServer) unixConn(t *testing.T) *grpc.ClientConn {
	return dial(t, "unix://"+SocketPath(ts.dataDir))
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

func (ts *testServer) tokenConn(t *testing.T, tok string) *grpc.ClientConn {
	opts := []grpc.DialOption{}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(tok)))
	}
	return dial(t, "passthrough:///"+ts.tcpAddr, opts...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("got %v (%v), want %v", st.Code(), err, code)
	}
	if reason != "" {
		got := ""
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				got = info.Reason
			}
		}
		if got != reason {
			t.Fatalf("reason %q, want %q (%v)", got, reason, err)
		}
	}
	return st
}

func TestPeerCredentialsPrincipal(t *testing.T) {
	ts := startServer(t)
	info, err := apipb.NewHostServiceClient(ts.unixConn(t)).GetInfo(ctxT(t), &apipb.GetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Principal != self || info.ApiVersion != APIVersion || info.DefaultExecutor != "testexec" {
		t.Fatalf("info = %v", info)
	}
}

func TestUnknownPeerRefusedBeforeTheRequest(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.Principals = map[uint32]string{uint32(os.Getuid()) + 1: "someone"} })
	ts.fake.add(self, "t_1", store.StatusRunning)
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	_, err := tc.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_1"})
	st := wantCode(t, err, codes.PermissionDenied, ReasonUnknownPeer)
	if !strings.Contains(st.Message(), "[principals]") {
		t.Errorf("the refusal does not say what to do: %q", st.Message())
	}
	// A malformed request is refused for the caller, not for the request.
	_, err = tc.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "../x"})
	wantCode(t, err, codes.PermissionDenied, ReasonUnknownPeer)
	stream, err := tc.WatchTask(ctxT(t), &apipb.WatchTaskRequest{TaskId: "t_1"})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.PermissionDenied, ReasonUnknownPeer)
	if ts.fake.calls != 0 {
		t.Fatalf("the backend was called %d times for a refused caller", ts.fake.calls)
	}
}

func TestTokens(t *testing.T) {
	// More wrong tokens than the default backoff allows: this test is about
	// the answer to each, TestWrongTokensAreThrottled about their number.
	ts := startServer(t, func(o *Options) { o.Listener.FailuresBeforeBackoff = 100 })
	ts.fake.add(tokenUser, "t_mine", store.StatusRunning)
	ts.fake.add(self, "t_other", store.StatusRunning)

	info, err := apipb.NewHostServiceClient(ts.tokenConn(t, goodToken)).GetInfo(ctxT(t), &apipb.GetInfoRequest{})
	if err != nil || info.Principal != tokenUser {
		t.Fatalf("good token: %v %v", info, err)
	}
	// A bad token, or none, is refused alike whether the task exists or
	// not: nothing about tasks leaks before authentication.
	for _, tok := range []string{"", "wrong", goodToken + "x", strings.Repeat("a", 600)} {
		tc := apipb.NewTaskServiceClient(ts.tokenConn(t, tok))
		_, errExists := tc.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_mine"})
		_, errMissing := tc.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_nope"})
		wantCode(t, errExists, codes.Unauthenticated, ReasonBadToken)
		if errExists.Error() != errMissing.Error() {
			t.Fatalf("token %q: existing task %q vs missing %q", tok, errExists, errMissing)
		}
	}
	if ts.fake.calls != 0 {
		t.Fatalf("the backend was called %d times for refused callers", ts.fake.calls)
	}
}

func TestOtherPrincipalsTaskIsNotFound(t *testing.T) {
	ts := startServer(t)
	ts.fake.add(self, "t_mine", store.StatusInterrupted)
	ts.fake.add(tokenUser, "t_theirs", store.StatusInterrupted)
	mine := apipb.NewTaskServiceClient(ts.unixConn(t))
	theirs := apipb.NewTaskServiceClient(ts.tokenConn(t, goodToken))

	if _, err := mine.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_mine"}); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(tc apipb.TaskServiceClient, id string) error{
		"get": func(tc apipb.TaskServiceClient, id string) error {
			_, err := tc.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: id})
			return err
		},
		"cancel": func(tc apipb.TaskServiceClient, id string) error {
			_, err := tc.CancelTask(ctxT(t), &apipb.CancelTaskRequest{TaskId: id})
			return err
		},
		"resume": func(tc apipb.TaskServiceClient, id string) error {
			_, err := tc.ResumeTask(ctxT(t), &apipb.ResumeTaskRequest{TaskId: id})
			return err
		},
		"watch": func(tc apipb.TaskServiceClient, id string) error {
			s, err := tc.WatchTask(ctxT(t), &apipb.WatchTaskRequest{TaskId: id})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
	}
	for name, call := range calls {
		foreign := call(theirs, "t_mine")
		missing := call(theirs, "t_zzzz")
		wantCode(t, foreign, codes.NotFound, ReasonNotFound)
		if strings.ReplaceAll(foreign.Error(), "t_mine", "ID") != strings.ReplaceAll(missing.Error(), "t_zzzz", "ID") {
			t.Errorf("%s: foreign %q vs missing %q", name, foreign, missing)
		}
	}
	list, err := theirs.ListTasks(ctxT(t), &apipb.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 || list.Tasks[0].Id != "t_theirs" {
		t.Fatalf("list = %v %v", list, err)
	}
}

func TestErrorMapping(t *testing.T) {
	cases := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{&plugin.FieldError{Field: "max_steps", Message: "is 500: above the cap of 200"}, codes.InvalidArgument, ReasonInvalidArgument},
		{fmt.Errorf("x: %w", store.ErrNotFound), codes.NotFound, ReasonNotFound},
		{&store.TransitionError{TaskID: "t", Current: store.StatusCompleted, To: store.StatusRunning}, codes.FailedPrecondition, ReasonTaskConflict},
		{&store.ApprovalResolvedError{ID: "a", Current: store.ApprovalApproved}, codes.FailedPrecondition, ReasonApprovalResolved},
		{&plugin.UnavailableError{Kind: "machinespirit", Check: "disabled", Detail: "off"}, codes.FailedPrecondition, ReasonExecutorUnavailable},
		{&host.BusyError{Limit: 2}, codes.ResourceExhausted, ReasonBusy},
		{fmt.Errorf("create: %w", &store.QueueFullError{Limit: 32, Queued: 32}), codes.ResourceExhausted, ReasonQueueFull},
		{host.ErrDisabled, codes.FailedPrecondition, ReasonTasksDisabled},
		{host.ErrShuttingDown, codes.Unavailable, ReasonShuttingDown},
		{errors.New("disk on fire at /secret/path"), codes.Internal, ReasonInternal},
	}
	ts := startServer(t)
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	for _, c := range cases {
		ts.fake.mu.Lock()
		ts.fake.err = c.err
		ts.fake.mu.Unlock()
		_, err := tc.CreateTask(ctxT(t), &apipb.CreateTaskRequest{Spec: []byte(`{"goal":"g"}`)})
		st := wantCode(t, err, c.code, c.reason)
		if c.code == codes.Internal && strings.Contains(st.Message(), "secret") {
			t.Errorf("an internal error leaks its detail: %q", st.Message())
		}
		if c.code == codes.InvalidArgument {
			found := false
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok && br.FieldViolations[0].Field == "max_steps" {
					found = true
				}
			}
			if !found || !strings.HasPrefix(st.Message(), "max_steps: ") {
				t.Errorf("field not named: %v", st)
			}
		}
	}
}

func TestRequestValidation(t *testing.T) {
	ts := startServer(t)
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	ac := apipb.NewApprovalServiceClient(ts.unixConn(t))
	ctx := ctxT(t)
	cases := []struct {
		name  string
		field string
		call  func() error
	}{
		{"empty task id", "task_id", func() error { _, err := tc.GetTask(ctx, &apipb.GetTaskRequest{}); return err }},
		{"long task id", "task_id", func() error {
			_, err := tc.GetTask(ctx, &apipb.GetTaskRequest{TaskId: strings.Repeat("t", 65)})
			return err
		}},
		{"odd task id", "task_id", func() error { _, err := tc.CancelTask(ctx, &apipb.CancelTaskRequest{TaskId: "t/../x"}); return err }},
		{"negative attempts", "attempts_limit", func() error {
			_, err := tc.GetTask(ctx, &apipb.GetTaskRequest{TaskId: "t_1", AttemptsLimit: -1})
			return err
		}},
		{"bad executor", "executor", func() error {
			_, err := tc.CreateTask(ctx, &apipb.CreateTaskRequest{Executor: "Bad Name", Spec: []byte(`{"goal":"g"}`)})
			return err
		}},
		{"no spec", "spec", func() error { _, err := tc.CreateTask(ctx, &apipb.CreateTaskRequest{}); return err }},
		{"huge spec", "spec", func() error {
			_, err := tc.CreateTask(ctx, &apipb.CreateTaskRequest{Spec: make([]byte, maxSpecBytes+1)})
			return err
		}},
		{"negative page size", "page_size", func() error { _, err := tc.ListTasks(ctx, &apipb.ListTasksRequest{PageSize: -1}); return err }},
		{"bad status", "status[1]", func() error {
			_, err := tc.ListTasks(ctx, &apipb.ListTasksRequest{Status: []string{"running", "sleeping"}})
			return err
		}},
		{"bad page token", "page_token", func() error { _, err := tc.ListTasks(ctx, &apipb.ListTasksRequest{PageToken: "abc"}); return err }},
		{"negative after_seq", "after_seq", func() error {
			s, err := tc.WatchTask(ctx, &apipb.WatchTaskRequest{TaskId: "t_1", AfterSeq: -1})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}},
		{"bad approval status", "status", func() error {
			_, err := ac.ListApprovals(ctx, &apipb.ListApprovalsRequest{Status: "maybe"})
			return err
		}},
		{"empty approval id", "approval_id", func() error { _, err := ac.Approve(ctx, &apipb.ResolveApprovalRequest{}); return err }},
		{"value on a rejection", "value_json", func() error {
			_, err := ac.Reject(ctx, &apipb.ResolveApprovalRequest{ApprovalId: "a_1", ValueJson: "1"})
			return err
		}},
		{"pattern without for_task", "pattern", func() error {
			_, err := ac.Approve(ctx, &apipb.ResolveApprovalRequest{ApprovalId: "a_1", Pattern: "echo *"})
			return err
		}},
		{"value for the task", "value_json", func() error {
			_, err := ac.Approve(ctx, &apipb.ResolveApprovalRequest{ApprovalId: "a_1", ValueJson: "1", ForTask: true})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := wantCode(t, c.call(), codes.InvalidArgument, ReasonInvalidArgument)
			if !strings.HasPrefix(st.Message(), c.field+": ") {
				t.Errorf("message %q does not name %s", st.Message(), c.field)
			}
		})
	}
	// An oversized request is refused by the transport bound.
	_, err := tc.CreateTask(ctx, &apipb.CreateTaskRequest{Spec: make([]byte, 2<<20)})
	wantCode(t, err, codes.ResourceExhausted, "")
}

func TestListPagesAndCap(t *testing.T) {
	ts := startServer(t)
	for i := range 7 {
		ts.fake.add(self, fmt.Sprintf("t_%d", i), store.StatusCompleted)
	}
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	var ids []string
	tok := ""
	for {
		resp, err := tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{PageSize: 3, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range resp.Tasks {
			ids = append(ids, x.Id)
			if len(x.Result) != 0 || len(x.Spec) != 0 {
				t.Fatal("a listed task carries its spec or result")
			}
		}
		if tok = resp.NextPageToken; tok == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "t_0,t_1,t_2,t_3,t_4,t_5,t_6" {
		t.Fatalf("pages gave %v", ids)
	}
	if _, err := tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{PageSize: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if ts.fake.lastQuery.Limit != maxPageSize+1 {
		t.Fatalf("page size not capped: the store was asked for %d", ts.fake.lastQuery.Limit)
	}
	resp, err := tc.GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_0", AttemptsLimit: 10})
	if err != nil || len(resp.Attempts) != 10 || resp.AttemptsOmitted != 50 || resp.Attempts[0].Number != 51 {
		t.Fatalf("attempts: %d omitted %d, %v", len(resp.Attempts), resp.AttemptsOmitted, err)
	}
}

func TestExecutors(t *testing.T) {
	ts := startServer(t)
	resp, err := apipb.NewHostServiceClient(ts.unixConn(t)).ListExecutors(ctxT(t), &apipb.ListExecutorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Executors) != 2 {
		t.Fatalf("executors = %v", resp.Executors)
	}
	ms, te := resp.Executors[0], resp.Executors[1]
	if ms.Available || ms.UnavailableCheck != "disabled" || !te.Available || !te.Default || te.Version != "1.0.0" || te.Sha256 != "ab" {
		t.Fatalf("executors = %v", resp.Executors)
	}
}

// recvAll reads a watch stream to its end.
func recvAll(stream apipb.TaskService_WatchTaskClient) ([]*apipb.WatchTaskResponse, error) {
	var out []*apipb.WatchTaskResponse
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

func TestWatchStreamsUntilTheTaskStops(t *testing.T) {
	ts := startServer(t)
	ts.fake.add(self, "t_w", store.StatusRunning)
	ts.fake.emit("t_w", "task.started", "")
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	stream, err := tc.WatchTask(ctxT(t), &apipb.WatchTaskRequest{TaskId: "t_w"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetSnapshot().GetStatus() != "running" {
		t.Fatalf("first message %v %v", first, err)
	}
	second, err := stream.Recv()
	if err != nil || second.GetEvent().GetType() != "task.started" {
		t.Fatalf("second message %v %v", second, err)
	}
	// New events arrive live; the stream ends once the task has stopped.
	ts.fake.emit("t_w", "step.started", "")
	ts.fake.emit("t_w", "task.completed", store.StatusCompleted)
	rest, err := recvAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, m := range rest {
		if e := m.GetEvent(); e != nil {
			types = append(types, e.Type)
		}
	}
	last := rest[len(rest)-1].GetFinal()
	if strings.Join(types, ",") != "step.started,task.completed" || last.GetStatus() != "completed" {
		t.Fatalf("events %v, final %v", types, last)
	}
	// A late watcher from a seq gets the rest and the final task at once.
	stream, err = tc.WatchTask(ctxT(t), &apipb.WatchTaskRequest{TaskId: "t_w", AfterSeq: second.GetEvent().Seq})
	if err != nil {
		t.Fatal(err)
	}
	all, err := recvAll(stream)
	if err != nil || len(all) != 4 || all[3].GetFinal() == nil {
		t.Fatalf("replay: %v %v", all, err)
	}
}

func TestWatchEndsWhenTheServerStops(t *testing.T) {
	ts := startServer(t)
	ts.fake.add(self, "t_p", store.StatusPending)
	stream, err := apipb.NewTaskServiceClient(ts.unixConn(t)).WatchTask(ctxT(t), &apipb.WatchTaskRequest{TaskId: "t_p"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts.srv.Stop(ctx)
	_, err = stream.Recv()
	wantCode(t, err, codes.Unavailable, "")
	if ctx.Err() != nil {
		t.Fatal("Stop waited for the watch stream until its deadline")
	}
}

func TestWatchLimit(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.MaxWatchers = 1 })
	ts.fake.add(self, "t_p", store.StatusPending)
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	s1, err := tc.WatchTask(ctxT(t), &apipb.WatchTaskRequest{TaskId: "t_p"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatal(err)
	}
	s2, err := tc.WatchTask(ctxT(t), &apipb.WatchTaskRequest{TaskId: "t_p"})
	if err == nil {
		_, err = s2.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, ReasonWatchLimit)
}

func TestListenUnixPermissions(t *testing.T) {
	dir, err := os.MkdirTemp("", "apiperm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "taskhost.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := ListenUnix(dir, -1)
	if err != nil {
		t.Fatal(err)
	}
	mode := func(p string) os.FileMode {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if m := mode(dir); m != 0o700 {
		t.Errorf("data dir mode %o, want 700", m)
	}
	if m := mode(SocketPath(dir)); m != 0o600 {
		t.Errorf("socket mode %o, want 600", m)
	}
	// A socket left behind (a killed daemon) is replaced.
	ln.SetUnlinkOnClose(false)
	ln.Close()
	ln, err = ListenUnix(dir, -1)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ln.Close()

	// With a group, the group may enter the dir and use the socket, and
	// reaches nothing else.
	gid := os.Getgid()
	ln, err = ListenUnix(dir, gid)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if m := mode(dir); m != 0o710 {
		t.Errorf("data dir mode %o, want 710", m)
	}
	if m := mode(SocketPath(dir)); m != 0o660 {
		t.Errorf("socket mode %o, want 660", m)
	}
	if m := mode(filepath.Join(dir, "taskhost.db")); m != 0o600 {
		t.Errorf("store mode %o, want 600", m)
	}

	// Something else in the socket's place is not removed.
	other, err := os.MkdirTemp("", "apiperm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(other)
	if err := os.WriteFile(SocketPath(other), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(other, -1); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a file in the socket's place: %v", err)
	}
	if _, err := ListenUnix("/tmp/"+strings.Repeat("d", 110), -1); err == nil || !strings.Contains(err.Error(), "capped") {
		t.Fatalf("a long path: %v", err)
	}
}

func TestListenTCPLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "localhost:0"} {
		if ln, err := ListenTCP(addr); err == nil {
			ln.Close()
			t.Errorf("ListenTCP(%q) accepted", addr)
		}
	}
}

// Workspace files given at create reach the Runner as they were sent.
func TestCreateTaskPassesFiles(t *testing.T) {
	ts := startServer(t)
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	_, err := tc.CreateTask(ctxT(t), &apipb.CreateTaskRequest{Spec: []byte(`{"goal":"g"}`),
		Files: []*apipb.WorkspaceFile{{Name: "ctx.txt", Data: []byte("context")}, {Name: "dir/b.bin", Data: []byte{0, 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts.fake.mu.Lock()
	defer ts.fake.mu.Unlock()
	got := ts.fake.lastFiles
	if len(got) != 2 || got[0].Name != "ctx.txt" || string(got[0].Data) != "context" || got[1].Name != "dir/b.bin" {
		t.Fatalf("files reaching the runner: %+v", got)
	}
}

// ListTasks lists newest first on request, filters by executor, says how
// many match, binds its page tokens to the listing they came from, and
// refuses a bad sort, executor or since naming the field.
func TestListSortFiltersAndTotal(t *testing.T) {
	ts := startServer(t)
	for i := range 5 {
		x := ts.fake.add(self, fmt.Sprintf("t_%d", i), store.StatusCompleted)
		if i%2 == 1 {
			x.Executor = "legacy"
			ts.fake.tasks[x.ID] = x
		}
	}
	ts.fake.add("someone-else", "theirs", store.StatusCompleted)
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	list := func(req *apipb.ListTasksRequest) (ids []string, total int64) {
		t.Helper()
		for {
			resp, err := tc.ListTasks(ctxT(t), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range resp.Tasks {
				ids = append(ids, x.Id)
			}
			total = resp.Total
			if req.PageToken = resp.NextPageToken; req.PageToken == "" {
				return ids, total
			}
		}
	}
	for _, tc := range []struct {
		req   *apipb.ListTasksRequest
		want  string
		total int64
	}{
		{&apipb.ListTasksRequest{PageSize: 2}, "t_0,t_1,t_2,t_3,t_4", 5},
		{&apipb.ListTasksRequest{PageSize: 2, Sort: "-created"}, "t_4,t_3,t_2,t_1,t_0", 5},
		{&apipb.ListTasksRequest{PageSize: 1, Sort: "-created", Executor: "legacy"}, "t_3,t_1", 2},
		{&apipb.ListTasksRequest{Executor: "none"}, "", 0},
	} {
		ids, total := list(tc.req)
		if strings.Join(ids, ",") != tc.want || total != tc.total {
			t.Errorf("%v: %v (total %d), want %s (total %d)", tc.req, ids, total, tc.want, tc.total)
		}
	}

	since := time.Unix(1700000000, 5)
	if _, err := tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{SinceUnixNano: since.UnixNano()}); err != nil || !ts.fake.lastQuery.Since.Equal(since) {
		t.Fatalf("since reached the store as %v (%v)", ts.fake.lastQuery.Since, err)
	}
	if _, err := tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{Executor: strings.Repeat("x", store.MaxExecutorBytes)}); err != nil {
		t.Fatalf("an executor at the limit: %v", err)
	}

	// A token of one listing does not page another.
	first, err := tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{PageSize: 1, Sort: "-created"})
	if err != nil || first.NextPageToken == "" {
		t.Fatalf("first page: %v", err)
	}
	_, err = tc.ListTasks(ctxT(t), &apipb.ListTasksRequest{PageSize: 1, PageToken: first.NextPageToken})
	if st := wantCode(t, err, codes.InvalidArgument, ""); !strings.Contains(st.Message(), "page_token") {
		t.Errorf("a token used with another sort: %v", st.Message())
	}

	for _, bad := range []struct {
		req  *apipb.ListTasksRequest
		want string
	}{
		{&apipb.ListTasksRequest{Sort: "newest"}, `sort: "newest" is not an order: use created, -created or status`},
		{&apipb.ListTasksRequest{Executor: strings.Repeat("x", store.MaxExecutorBytes+1)}, "executor: is 65 bytes, at most 64"},
		{&apipb.ListTasksRequest{SinceUnixNano: -1}, "since_unix_nano: is -1, must not be negative"},
	} {
		_, err := tc.ListTasks(ctxT(t), bad.req)
		if st := wantCode(t, err, codes.InvalidArgument, ""); !strings.Contains(st.Message(), bad.want) {
			t.Errorf("%v: %q, want it to say %q", bad.req, st.Message(), bad.want)
		}
	}
}

// A peer whose uid is one the daemon runs untrusted commands under is
// refused by that uid, before its principal is looked up and whatever it
// did inside (a user namespace of its own fills its capability bounding
// set again, which is why the uid decides); a principal mapped to such a
// uid is refused when the server is built.
func TestSandboxUIDRefused(t *testing.T) {
	me := int(os.Getuid())
	sandbox := uids.Range{First: me, Count: 1}
	ts := startServer(t, func(o *Options) {
		o.Principals = map[uint32]string{uint32(me) + 1: "someone"}
		o.Sandbox = sandbox
	})
	ts.fake.add(self, "t_1", store.StatusRunning)
	_, err := apipb.NewTaskServiceClient(ts.unixConn(t)).GetTask(ctxT(t), &apipb.GetTaskRequest{TaskId: "t_1"})
	st := wantCode(t, err, codes.PermissionDenied, ReasonUnknownPeer)
	if !strings.Contains(st.Message(), "untrusted commands") {
		t.Errorf("refused as %q, want the sandbox's refusal", st.Message())
	}
	if ts.fake.calls != 0 {
		t.Fatalf("the backend was called %d times for a refused caller", ts.fake.calls)
	}
	if _, err := newAuthenticator(map[uint32]string{uint32(me): self}, nil, sandbox, nil); err == nil || !strings.Contains(err.Error(), "inside the range") {
		t.Errorf("a principal inside the sandbox range: %v, want refused", err)
	}
}

// TestControlTasksRefusals: a bad act is InvalidArgument naming the
// field; all_principals from a non-admin is PermissionDenied; a daemon
// whose Tasks has no control answers Unimplemented.
func TestControlTasksRefusals(t *testing.T) {
	ts := startServer(t)
	tc := apipb.NewTaskServiceClient(ts.unixConn(t))
	_, err := tc.ControlTasks(ctxT(t), &apipb.ControlTasksRequest{Action: "explode"})
	wantCode(t, err, codes.InvalidArgument, ReasonInvalidArgument)
	_, err = tc.ControlTasks(ctxT(t), &apipb.ControlTasksRequest{Action: "cancel", AllPrincipals: true})
	wantCode(t, err, codes.PermissionDenied, ReasonNotAdmin)
	_, err = tc.ControlTasks(ctxT(t), &apipb.ControlTasksRequest{Action: "cancel"})
	wantCode(t, err, codes.Unimplemented, ReasonUnimplemented)
	_, err = tc.PauseTask(ctxT(t), &apipb.PauseTaskRequest{TaskId: ""})
	wantCode(t, err, codes.InvalidArgument, ReasonInvalidArgument)
}

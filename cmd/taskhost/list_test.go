package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// pagingAPI lists n tasks in pages as the daemon does: oldest first, or
// newest first for sort "-created"; it keeps the last request.
type pagingAPI struct {
	fakeAPI
	n    int
	last *atomic.Pointer[apipb.ListTasksRequest]
}

func (p pagingAPI) ListTasks(_ context.Context, req *apipb.ListTasksRequest) (*apipb.ListTasksResponse, error) {
	p.last.Store(req)
	from := 0
	if req.PageToken != "" {
		from, _ = strconv.Atoi(req.PageToken)
	}
	resp := &apipb.ListTasksResponse{Total: int64(p.n)}
	end := min(from+int(req.PageSize), p.n)
	for i := from; i < end; i++ {
		idx := i
		if req.Sort == "-created" {
			idx = p.n - 1 - i
		}
		t := fixedTask("completed", "")
		t.Id, t.Result = fmt.Sprintf("t_%026d", idx), nil
		resp.Tasks = append(resp.Tasks, t)
	}
	if end < p.n {
		resp.NextPageToken = strconv.Itoa(end)
	}
	return resp, nil
}

func startPagingAPI(t *testing.T, n int) (string, *atomic.Pointer[apipb.ListTasksRequest]) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	last := &atomic.Pointer[apipb.ListTasksRequest]{}
	srv := grpc.NewServer()
	apipb.RegisterTaskServiceServer(srv, pagingAPI{n: n, last: last})
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return path, last
}

// task list shows the newest first by default, reads only the pages it
// needs for --limit, and says how many of how many it shows; --sort created
// turns it round.
func TestTaskListShowsTheNewest(t *testing.T) {
	const n = 1234
	sock, _ := startPagingAPI(t, n)
	id := func(i int) string { return fmt.Sprintf("t_%026d", i) }
	tests := []struct {
		args        []string
		first, last string // the first and last rows shown
		marker      string // on stderr; "" = none
		rows, omit  int
	}{
		{[]string{"--limit", "1"}, id(n - 1), id(n - 1), "showing 1 of 1234 tasks (--sort -created); 1233 are not shown", 1, 1233},
		{[]string{"--limit", "1000"}, id(n - 1), id(n - 1000), "showing 1000 of 1234 tasks (--sort -created); 234 are not shown", 1000, 234},
		{[]string{"--limit", "1234"}, id(n - 1), id(0), "", 1234, 0},
		{[]string{"--limit", "5000"}, id(n - 1), id(0), "", 1234, 0},
		{[]string{"--limit", "2", "--sort", "created"}, id(0), id(1), "showing 2 of 1234 tasks (--sort created)", 2, 1232},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"task", "list", "--socket", sock}, tc.args...)
			out, errOut, code := runCLI(t, "", args...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || len(lines) != tc.rows+1 || !strings.HasPrefix(lines[1], tc.first) || !strings.HasPrefix(lines[len(lines)-1], tc.last) {
				t.Fatalf("exit %d, %d rows, first %q; want %d rows from %s to %s\n%s", code, len(lines)-1, lines[min(1, len(lines)-1)], tc.rows, tc.first, tc.last, errOut)
			}
			if (tc.marker == "") != !strings.Contains(errOut, "showing ") || !strings.Contains(errOut, tc.marker) {
				t.Fatalf("stderr %q, want marker %q", errOut, tc.marker)
			}
			out, _, _ = runCLI(t, "", append(args, "--json")...)
			var v struct {
				Tasks   []json.RawMessage `json:"tasks"`
				Omitted int               `json:"omitted"`
				Shown   int               `json:"shown"`
				Total   int               `json:"total"`
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Tasks) != tc.rows || v.Omitted != tc.omit || v.Shown != tc.rows || v.Total != n {
				t.Fatalf("--json: %d tasks, shown %d of %d, omitted %d, %v; want %d of %d, omitted %d", len(v.Tasks), v.Shown, v.Total, v.Omitted, err, tc.rows, n, tc.omit)
			}
		})
	}
}

// --executor and --since reach the daemon; a bad --since or --sort is a
// usage error naming the flag, before any call.
func TestTaskListFilters(t *testing.T) {
	sock, last := startPagingAPI(t, 3)
	before := time.Now()
	if _, errOut, code := runCLI(t, "", "task", "list", "--socket", sock, "--executor", "legacy", "--since", "24h"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	after := time.Now()
	req := last.Load()
	since := time.Unix(0, req.GetSinceUnixNano())
	if req.GetExecutor() != "legacy" || req.GetSort() != "-created" || since.Before(before.Add(-24*time.Hour)) || since.After(after.Add(-24*time.Hour)) {
		t.Fatalf("request %v, since %v", req, since)
	}
	if _, _, code := runCLI(t, "", "task", "list", "--socket", sock, "--since", "2026-01-02T15:04:05Z"); code != 0 || last.Load().GetSinceUnixNano() != time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC).UnixNano() {
		t.Fatalf("exit %d, since %d", code, last.Load().GetSinceUnixNano())
	}
	for _, bad := range []struct{ flag, value, want string }{
		{"--since", "yesterday", `--since: "yesterday" is neither a duration`},
		{"--since", "-5m", "a duration must be positive"},
		{"--since", "1000000h", "a duration must be positive and at most"},
		{"--sort", "newest", `--sort "newest": use -created, created or status`},
	} {
		_, errOut, code := runCLI(t, "", "task", "list", "--socket", sock, bad.flag, bad.value)
		if code != exitUsage || !strings.Contains(errOut, bad.want) {
			t.Errorf("%s %s: exit %d, %q; want %d and %q", bad.flag, bad.value, code, errOut, exitUsage, bad.want)
		}
	}
}

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
	"testing"

	"google.golang.org/grpc"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// pagingAPI lists n tasks, oldest first, in pages as the daemon does.
type pagingAPI struct {
	fakeAPI
	n int
}

func (p pagingAPI) ListTasks(_ context.Context, req *apipb.ListTasksRequest) (*apipb.ListTasksResponse, error) {
	from := 0
	if req.PageToken != "" {
		from, _ = strconv.Atoi(req.PageToken)
	}
	resp := &apipb.ListTasksResponse{}
	end := min(from+int(req.PageSize), p.n)
	for i := from; i < end; i++ {
		t := fixedTask("completed", "")
		t.Id, t.Result = fmt.Sprintf("t_%026d", i), nil
		resp.Tasks = append(resp.Tasks, t)
	}
	if end < p.n {
		resp.NextPageToken = strconv.Itoa(end)
	}
	return resp, nil
}

func startPagingAPI(t *testing.T, n int) string {
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
	srv := grpc.NewServer()
	apipb.RegisterTaskServiceServer(srv, pagingAPI{n: n})
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return path
}

// task list keeps the newest --limit tasks, past several pages, and says
// how many older ones it leaves out.
func TestTaskListShowsTheNewest(t *testing.T) {
	const n = 1234
	sock := startPagingAPI(t, n)
	newest := fmt.Sprintf("t_%026d", n-1)
	tests := []struct {
		limit      int
		first      string // the first row shown
		marker     string // on stderr; "" = none
		rows, omit int
	}{
		{1, newest, "showing the newest 1 of 1234 tasks; 1233 older ones", 1, 1233},
		{1000, fmt.Sprintf("t_%026d", n-1000), "showing the newest 1000 of 1234 tasks", 1000, 234},
		{1234, fmt.Sprintf("t_%026d", 0), "", 1234, 0},
		{5000, fmt.Sprintf("t_%026d", 0), "", 1234, 0},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.limit), func(t *testing.T) {
			out, errOut, code := runCLI(t, "", "task", "list", "--limit", strconv.Itoa(tc.limit), "--socket", sock)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || len(lines) != tc.rows+1 || !strings.HasPrefix(lines[1], tc.first) || !strings.HasPrefix(lines[len(lines)-1], newest) {
				t.Fatalf("exit %d, %d rows, first %q; want %d rows from %s to %s\n%s", code, len(lines)-1, lines[min(1, len(lines)-1)], tc.rows, tc.first, newest, errOut)
			}
			if (tc.marker == "") != !strings.Contains(errOut, "showing the newest") || !strings.Contains(errOut, tc.marker) {
				t.Fatalf("stderr %q, want marker %q", errOut, tc.marker)
			}
			out, _, _ = runCLI(t, "", "task", "list", "--limit", strconv.Itoa(tc.limit), "--socket", sock, "--json")
			var v struct {
				Tasks   []json.RawMessage `json:"tasks"`
				Omitted int               `json:"omitted"`
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Tasks) != tc.rows || v.Omitted != tc.omit {
				t.Fatalf("--json: %d tasks, omitted %d, %v; want %d and %d", len(v.Tasks), v.Omitted, err, tc.rows, tc.omit)
			}
		})
	}
}

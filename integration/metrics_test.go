package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/taskhost/taskhost/internal/testwait"
)

// metricsAddr is the metrics listener's address from the daemon's
// "serving" log line.
func metricsAddr(t *testing.T, d *daemon) string {
	t.Helper()
	for line := range strings.SplitSeq(d.logText(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["@message"] == "serving" {
			if addr, _ := m["metrics"].(string); addr != "" {
				return addr
			}
		}
	}
	t.Fatalf("no metrics address in the serving line:\n%s", d.logText())
	return ""
}

// get fetches url and returns the status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// samples reads a Prometheus text exposition into series → value.
func samples(t *testing.T, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestDaemonMetricsHealthAndReflection runs a real daemon with
// [api] metrics_listen: /metrics shows a task while its plugin runs and
// counts its steps once it completed, /healthz says ok, the gRPC health
// service says SERVING, reflection lists the API, and the listener goes
// with the daemon.
func TestDaemonMetricsHealthAndReflection(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, writeConfig(t, work, "[api]\nmetrics_listen = \"127.0.0.1:0\"\n"))
	base := "http://" + metricsAddr(t, d)

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}

	id := createTask(t, d, work, map[string]any{"goal": "metrics", "testexec": map[string]any{"steps": 3, "sleep_ms": 400}})
	var during map[string]float64
	testwait.Until(t, 20*time.Second, "a scrape showing the running task", func() bool {
		_, body := get(t, base+"/metrics")
		during = samples(t, body)
		return during["taskhost_running_plugins"] == 1 && during["taskhost_steps_running"] == 1
	})
	if during[`taskhost_tasks{status="running"}`] != 1 || during["taskhost_store_up"] != 1 || during["taskhost_serving"] != 1 {
		t.Errorf("during the task: %v", during)
	}

	w := startWatch(t, d, id)
	if final, code := w.result(t); code != 0 || final.Status != "completed" {
		t.Fatalf("task ended %+v (exit %d)", final, code)
	}
	_, body := get(t, base+"/metrics")
	after := samples(t, body)
	for series, want := range map[string]float64{
		`taskhost_tasks{status="completed"}`:                          1,
		`taskhost_tasks{status="running"}`:                            0,
		`taskhost_running_plugins`:                                    0,
		`taskhost_steps_total{outcome="continue",status="completed"}`: 2,
		`taskhost_steps_total{outcome="complete",status="completed"}`: 1,
		`taskhost_approvals_pending`:                                  0,
		`taskhost_plugin_starts_total{executor="testexec"}`:           1,
		// Counted by the runner as they happened, not read from the store.
		`taskhost_step_duration_seconds_count{executor="testexec",status="completed"}`: 3,
		`taskhost_effects{kind="tool",status="observed"}`:                              0,
		`taskhost_budget_exhausted_tasks{budget="steps"}`:                              0,
	} {
		if got, ok := after[series]; !ok || got != want {
			t.Errorf("after the task %s = %v (present %v), want %v\n%s", series, got, ok, want, body)
		}
	}

	if after["taskhost_store_commit_seconds_count"] < 3 || after[`taskhost_step_duration_seconds_sum{executor="testexec",status="completed"}`] < 3*0.4 {
		t.Errorf("commit latency and step duration not observed:\n%s", body)
	}

	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("grpc health: %v, %v; want SERVING", hr.GetStatus(), err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	lr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range lr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "taskhost.api.v1.TaskService") || !slices.Contains(names, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %v", names)
	}
	_ = stream.CloseSend()

	if code := d.stop(t); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
	if resp, err := http.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("/healthz answers %d after the daemon stopped", resp.StatusCode)
	}
}

package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// daemonStatusJSON is `taskhost status --json`, as docs/cli.md documents it.
type daemonStatusJSON struct {
	Up         bool   `json:"up"`
	Target     string `json:"target"`
	Error      string `json:"error"`
	Version    string `json:"version"`
	APIVersion string `json:"api_version"`
	Principal  string `json:"principal"`
	Store      string `json:"store"`
	Executors  []struct {
		Kind    string `json:"kind"`
		Default bool   `json:"default"`
		State   string `json:"state"`
		Check   string `json:"check"`
		Detail  string `json:"detail"`
	} `json:"executors"`
	Model *struct {
		Provider  string `json:"provider"`
		Name      string `json:"name"`
		Preflight bool   `json:"preflight"`
		CheckedAt string `json:"checked_at"`
		OK        bool   `json:"ok"`
		Kind      string `json:"kind"`
		Message   string `json:"message"`
	} `json:"model"`
	Tasks  map[string]int64 `json:"tasks"`
	Counts struct {
		AllPrincipals bool `json:"all_principals"`
	} `json:"counts"`
}

// taskhost status against a live daemon whose model endpoint refuses the
// key: up, its version, the store ok, the executors, the failed model
// preflight by kind (and a check on demand through `executors
// --model-preflight` once the key works), the task counts; then, with the
// daemon stopped, a dead socket: exit 5 and "up": false.
func TestStatusCommand(t *testing.T) {
	t.Parallel()
	var keyOK atomic.Bool
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !keyOK.Load() {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"Incorrect API key provided"}}`)
			return
		}
		io.WriteString(w, `{"data":[{"id":"test"}]}`)
	}))
	t.Cleanup(srv.Close)
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, writeConfig(t, work, "[model]\nprovider = \"openai\"\nbase_url = \""+srv.URL+"/v1\"\nmodel = \"test\"\ntimeout_seconds = 5\npreflight = true\n"))

	id := createTask(t, d, work, map[string]any{"goal": "status", "testexec": map[string]any{"steps": 1}})
	if final, code := startWatch(t, d, id).result(t); code != 0 || final.Status != "completed" {
		t.Fatalf("task ended %+v (exit %d)", final, code)
	}
	var v daemonStatusJSON
	deadline := time.Now().Add(20 * time.Second)
	for {
		v = daemonStatusJSON{}
		d.cliJSON(t, &v, "status")
		if v.Model != nil && v.Model.CheckedAt != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the start-up preflight, with a deadline
	}
	if !v.Up || v.Version == "" || v.APIVersion != "v1" || v.Principal == "" || v.Store != "ok" {
		t.Errorf("status: %+v", v)
	}
	if v.Tasks["completed"] != 1 || v.Tasks["running"] != 0 || len(v.Tasks) != 8 || v.Tasks["blocked"] != 0 || v.Counts.AllPrincipals {
		t.Errorf("task counts: %v", v.Tasks)
	}
	found := false
	for _, x := range v.Executors {
		if x.Kind == "testexec" {
			found = x.State == "ok"
		}
	}
	if !found {
		t.Errorf("executors: %+v, want testexec ok", v.Executors)
	}
	if m := v.Model; m == nil || m.Provider != "openai" || !m.Preflight || m.OK || m.Kind != "auth" || !strings.Contains(m.Message, "Incorrect API key provided") {
		t.Errorf("model: %+v, want a failed preflight of kind auth", v.Model)
	}
	out, errOut, code := d.cli(t, "status")
	if code != 0 || !strings.Contains(out, "up: taskhost ") || !strings.Contains(out, "store      ok") ||
		!strings.Contains(out, "preflight failed (auth)") || !strings.Contains(out, "completed 1") {
		t.Errorf("status text: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(d.logText(), "model preflight failed") {
		t.Errorf("the daemon did not log the failed preflight:\n%s", d.logText())
	}

	// The key is fixed: a check on demand sees it, one request more.
	keyOK.Store(true)
	before := hits.Load()
	out, errOut, code = d.cli(t, "executors", "--model-preflight", "--json")
	var ex struct {
		Executors []json.RawMessage `json:"executors"`
		Model     struct {
			OK   bool   `json:"ok"`
			Kind string `json:"kind"`
		} `json:"model"`
	}
	if err := json.Unmarshal([]byte(out), &ex); err != nil || code != 0 || !ex.Model.OK || ex.Model.Kind != "" || hits.Load() != before+1 {
		t.Errorf("executors --model-preflight: exit %d, %+v, %d requests (want %d), %v\n%s%s", code, ex.Model, hits.Load(), before+1, err, out, errOut)
	}

	if c := d.stop(t); c != 0 {
		t.Fatalf("daemon exit %d", c)
	}
	out, _, code = d.cli(t, "status", "--json")
	var down daemonStatusJSON
	if err := json.Unmarshal([]byte(out), &down); err != nil || code != 5 || down.Up || down.Error == "" || !strings.Contains(down.Target, "taskhost.sock") {
		t.Errorf("status of a stopped daemon: exit %d, %+v, %v\n%s", code, down, err, out)
	}
	out, _, code = d.cli(t, "status")
	if code != 5 || !strings.HasPrefix(out, "daemon     down: no taskhost daemon answers on unix socket ") {
		t.Errorf("status text of a stopped daemon: exit %d\n%s", code, out)
	}
}

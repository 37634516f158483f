package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/confine"
)

// daemon is a `taskhost serve` process with JSON logs.
type daemon struct {
	cmd     *exec.Cmd
	dataDir string
	socket  string
	tcp     string // the token listener's address, if any
	mu      sync.Mutex
	log     bytes.Buffer
	exited  chan struct{}
}

// startDaemon starts `taskhost serve` on dataDir (with config, when not
// empty) and waits for its "serving" log line.
func startDaemon(t *testing.T, dataDir, config string) *daemon {
	t.Helper()
	args := []string{"serve", "--data-dir", dataDir, "--log-format", "json", "--log-level", "info"}
	if config != "" {
		args = append(args, "--config", config)
	}
	d := &daemon{cmd: exec.Command(filepath.Join(binDir, "taskhost"), args...), dataDir: dataDir, exited: make(chan struct{})}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			d.mu.Lock()
			d.log.Write(sc.Bytes())
			d.log.WriteByte('\n')
			d.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["@message"] == "serving" {
				ready <- m
			}
		}
		io.Copy(io.Discard, stderr)
		d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
		datadir.SweepRunDirs(dataDir)
		if t.Failed() {
			t.Logf("daemon log (%s):\n%s", dataDir, d.logText())
		}
	})
	select {
	case m := <-ready:
		d.socket, _ = m["socket"].(string)
		d.tcp, _ = m["tcp"].(string)
	case <-d.exited:
		t.Fatalf("the daemon exited (%v) before serving:\n%s", d.cmd.ProcessState, d.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("the daemon did not start serving:\n%s", d.logText())
	}
	return d
}

func (d *daemon) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// kill SIGKILLs the daemon and waits for it.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
}

// stop sends SIGTERM and returns the exit code once it has exited.
func (d *daemon) stop(t *testing.T) int {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the daemon did not stop within 30 s of SIGTERM:\n%s", d.logText())
	}
	return d.cmd.ProcessState.ExitCode()
}

// cli runs a taskhost client command against d's data dir.
func (d *daemon) cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return taskhost(t, append(args, "--data-dir", d.dataDir)...)
}

// cliJSON runs a client command with --json, expects exit 0 and decodes
// stdout into v.
func (d *daemon) cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errOut, code := d.cli(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("taskhost %v: exit %d\n%s%s", args, code, out, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields() // the shape docs/cli.md documents, nothing else
	if err := dec.Decode(v); err != nil {
		t.Fatalf("taskhost %v --json: %v\n%s", args, err, out)
	}
}

// The --json shapes of docs/cli.md.
type (
	meterJSON struct {
		Used  int64 `json:"used"`
		Limit int64 `json:"limit"`
		// EstimatedCalls: of model_tokens, the calls the host estimated.
		EstimatedCalls int64 `json:"estimated_calls"`
	}
	taskJSON struct {
		ID        string               `json:"id"`
		Principal string               `json:"principal"`
		Executor  string               `json:"executor"`
		Status    string               `json:"status"`
		Reason    string               `json:"reason"`
		Message   string               `json:"message"`
		RunID     int64                `json:"run_id"`
		Budgets   map[string]meterJSON `json:"budgets"`
		Result    json.RawMessage      `json:"result"`
		CreatedAt string               `json:"created_at"`
		UpdatedAt string               `json:"updated_at"`
		Host      string               `json:"host"` // task status only
		// QueuePosition: a pending task's place in the queue (1 is next).
		QueuePosition int64 `json:"queue_position"`
		// ModelUsage: what its model calls cost (task status only).
		ModelUsage *usageJSON `json:"model_usage"`
	}
	usageJSON struct {
		Calls            int64 `json:"calls"`
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		DurationMS       int64 `json:"duration_ms"`
	}
	attemptJSON struct {
		Attempt    int64      `json:"attempt"`
		RunID      int64      `json:"run_id"`
		Status     string     `json:"status"`
		Outcome    string     `json:"outcome"`
		Reason     string     `json:"reason"`
		Message    string     `json:"message"`
		Summary    string     `json:"summary"`
		Exit       string     `json:"exit"`
		StderrTail string     `json:"stderr_tail"`
		StartedAt  string     `json:"started_at"`
		Duration   string     `json:"duration"`
		ModelUsage *usageJSON `json:"model_usage"`
	}
	oneTask struct {
		Task taskJSON `json:"task"`
	}
	statusJSON struct {
		Task            taskJSON      `json:"task"`
		Attempts        []attemptJSON `json:"attempts"`
		AttemptsOmitted int64         `json:"attempts_omitted"`
		Unsettled       []effectJSON  `json:"unsettled_effects"`
		Tree            []taskJSON    `json:"tree"`
	}
	effectJSON struct {
		Attempt    int64  `json:"attempt"`
		Seq        int64  `json:"seq"`
		Status     string `json:"status"`
		Summary    string `json:"summary"`
		Resolution string `json:"resolution"`
		ResolvedBy string `json:"resolved_by"`
		ResolvedAt string `json:"resolved_at"`
	}
	listJSON struct {
		Tasks   []taskJSON `json:"tasks"`
		Shown   int        `json:"shown"`
		Total   int64      `json:"total"`
		Sort    string     `json:"sort"`
		Omitted int64      `json:"omitted"`
	}
	approvalJSON struct {
		ID         string `json:"id"`
		TaskID     string `json:"task_id"`
		RunID      int64  `json:"run_id"`
		Attempt    int64  `json:"attempt"`
		Kind       string `json:"kind"`
		Tool       string `json:"tool"`
		Prompt     string `json:"prompt"`
		Status     string `json:"status"`
		CreatedAt  string `json:"created_at"`
		ExpiresAt  string `json:"expires_at"`
		ResolvedAt string `json:"resolved_at"`
		Scope      string `json:"scope"`
		Pattern    string `json:"pattern"`
	}
	approvalsJSON struct {
		Approvals []approvalJSON `json:"approvals"`
		Truncated bool           `json:"truncated"`
	}
	// watchLine is one line of `task watch --json`.
	watchLine struct {
		Kind    string          `json:"kind"` // task | event | result
		Task    *taskJSON       `json:"task"`
		Seq     int64           `json:"seq"`
		Type    string          `json:"type"`
		Time    string          `json:"time"`
		Payload json.RawMessage `json:"payload"`
	}
)

// watcher is a `task watch --json` running in the background.
type watcher struct {
	*started
	lines []watchLine
}

func startWatch(t *testing.T, d *daemon, id string, extra ...string) *watcher {
	t.Helper()
	return &watcher{started: startTaskhost(t, append([]string{"task", "watch", id, "--json", "--data-dir", d.dataDir}, extra...)...)}
}

// next returns the next JSON line the watch prints.
func (w *watcher) next(t *testing.T) watchLine {
	t.Helper()
	raw := w.line(t, func(string) bool { return true })
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var l watchLine
	if err := dec.Decode(&l); err != nil {
		t.Fatalf("watch line %q: %v", raw, err)
	}
	w.lines = append(w.lines, l)
	return l
}

// until reads lines until one matches.
func (w *watcher) until(t *testing.T, match func(watchLine) bool) watchLine {
	t.Helper()
	for {
		if l := w.next(t); match(l) {
			return l
		}
	}
}

// event matches an event line of type typ, and with attempt n when n > 0.
func event(typ string, n int64) func(watchLine) bool {
	return func(l watchLine) bool {
		if l.Kind != "event" || l.Type != typ {
			return false
		}
		if n == 0 {
			return true
		}
		var p struct {
			Attempt int64 `json:"attempt"`
		}
		_ = json.Unmarshal(l.Payload, &p)
		return p.Attempt == n
	}
}

// result waits for the final line and the process's exit code.
func (w *watcher) result(t *testing.T) (taskJSON, int) {
	t.Helper()
	l := w.until(t, func(l watchLine) bool { return l.Kind == "result" })
	done := make(chan struct{})
	go func() { w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("task watch did not exit after its result")
	}
	return *l.Task, w.cmd.ProcessState.ExitCode()
}

// createTask creates a testexec task with spec and returns its id.
func createTask(t *testing.T, d *daemon, dir string, spec map[string]any, extra ...string) string {
	t.Helper()
	specFile := writeSpec(t, dir, spec)
	var v oneTask
	d.cliJSON(t, &v, append([]string{"task", "create", "--executor", "testexec", "--spec-file", specFile}, extra...)...)
	if v.Task.ID == "" || v.Task.Executor != "testexec" {
		t.Fatalf("created %+v", v.Task)
	}
	return v.Task.ID
}

// writeConfig writes a daemon config file into dir.
func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	if confine.Probe().LandlockABI < 1 && !strings.Contains(text, "[confinement]") {
		// [confinement] required fails closed without Landlock: on such a
		// kernel the tests opt out, as an operator would.
		text += "\n[confinement]\nrequired = false\n"
	}
	path := filepath.Join(dir, "taskhost.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var rw struct {
		Executors map[string]struct {
			ReadWrite []string `toml:"read_write"`
		}
	}
	if _, err := toml.Decode(text, &rw); err != nil {
		t.Fatalf("config %s: %v", path, err)
	}
	for _, ex := range rw.Executors {
		for _, p := range ex.ReadWrite {
			letPluginsWrite(t, p)
		}
	}
	return path
}

// letPluginsWrite makes a test's dir writable by a plugin under a uid of
// the daemon's pool, which reaches it only through its "others" mode bits
// and those of each dir above it: p 0777, every dir between it and the
// temp dir searchable.
func letPluginsWrite(t *testing.T, p string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	if rel, err := filepath.Rel(tmp, p); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return // not a test's dir: left as the test made it
	}
	if err := os.Chmod(p, 0o777); err != nil {
		t.Fatal(err)
	}
	for dir := filepath.Dir(p); dir != tmp; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, fi.Mode().Perm()|0o001); err != nil {
			t.Fatal(err)
		}
	}
}

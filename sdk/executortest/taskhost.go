package executortest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/text"
)

// Exit codes of `taskhost run` (its documented contract).
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitUnavailable = 5
	exitInterrupted = 6
)

// kitStopGraceSeconds is the plugin stop grace of the hosts the kit runs.
// It is longer than the host's default (hostStopGrace) on purpose: an
// executor that does not return when its step is cancelled then shows as a
// plugin that lives on, instead of being hidden by the host's kill.
const kitStopGraceSeconds = 5

// taskView is a task as `taskhost inspect --json` and `taskhost run --json`
// print it.
type taskView struct {
	ID       string           `json:"id"`
	Executor string           `json:"executor"`
	Status   string           `json:"status"`
	Reason   string           `json:"reason"`
	Message  string           `json:"message"`
	RunID    int64            `json:"run_id"`
	Budgets  map[string]meter `json:"budgets"`
	Result   json.RawMessage  `json:"result"`
}

type meter struct {
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"`
}

func (t taskView) String() string {
	s := t.Status
	if t.Reason != "" {
		s += " (" + t.Reason + ")"
	}
	if t.Message != "" {
		s += ": " + t.Message
	}
	return s
}

// attemptView is one step attempt as `taskhost inspect --json ID` prints it.
type attemptView struct {
	Attempt    int64  `json:"attempt"`
	RunID      int64  `json:"run_id"`
	Status     string `json:"status"`
	Outcome    string `json:"outcome"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	Summary    string `json:"summary"`
	Exit       string `json:"exit"`
	StderrTail string `json:"stderr_tail"`
	Duration   string `json:"duration"`
}

func (a attemptView) String() string {
	s := fmt.Sprintf("attempt %d (run %d): %s", a.Attempt, a.RunID, a.Status)
	for _, f := range []struct{ k, v string }{{"outcome", a.Outcome}, {"reason", a.Reason}, {"exit", a.Exit}, {"message", a.Message}, {"summary", a.Summary}} {
		if f.v != "" {
			s += fmt.Sprintf(" %s=%q", f.k, text.Clip(f.v, 200))
		}
	}
	return s
}

type inspectView struct {
	Task     taskView       `json:"task"`
	Attempts []attemptView  `json:"attempts"`
	Effects  []ledgerEffect `json:"effects"`
}

// completed counts the attempts that completed (of any run).
func (v inspectView) completed() int {
	n := 0
	for _, a := range v.Attempts {
		if a.Status == "completed" {
			n++
		}
	}
	return n
}

func (v inspectView) attemptLines() string {
	var b strings.Builder
	for _, a := range v.Attempts {
		b.WriteString("\n  " + a.String())
	}
	return b.String()
}

// effectLines lists the task's ledger, one effect a line, for a failure
// that depends on what the host answered or replayed.
func (v inspectView) effectLines() string {
	var b strings.Builder
	for _, e := range v.Effects {
		fmt.Fprintf(&b, "\n  effect %d.%d %s %q: %s", e.Attempt, e.Seq, e.Kind, text.Clip(e.Summary, 100), e.Status)
		if e.Replayed {
			b.WriteString(" (replayed)")
		}
		if e.Resolution != "" {
			b.WriteString(" resolution=" + e.Resolution)
		}
	}
	return b.String()
}

// runLine is one line of `taskhost run --json`: the task as created
// ("task"), an event ("event") or the task at the end ("result").
type runLine struct {
	Kind    string    `json:"kind"`
	Task    *taskView `json:"task"`
	Type    string    `json:"type"`
	Payload struct {
		Attempt int64  `json:"attempt"`
		Outcome string `json:"outcome"`
		Reason  string `json:"reason"`
		Exit    string `json:"exit"`
	} `json:"payload"`
	// read is when the kit read the line.
	read time.Time
}

// host is one taskhost set up as a user would: a data dir and a config
// that registers the executor under test. Each check gets its own.
type host struct {
	k        *kit
	dataDir  string
	config   string
	taskhost string // the taskhost binary to run
	// plugin is argv[0] of the executor processes this host starts, which
	// is how the kit tells them from other children of taskhost.
	plugin string
	specs  string // where spec files go
}

func (k *kit) newHost(t *testing.T, binary string) *host {
	t.Helper()
	dir, err := os.MkdirTemp(k.scratch, "h")
	if err != nil {
		t.Fatalf("executortest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil { // as the scratch dir
		t.Fatalf("executortest: %v", err)
	}
	h := &host{k: k, dataDir: filepath.Join(dir, "d"), config: filepath.Join(dir, "taskhost.toml"), taskhost: k.taskhost, specs: dir}
	if k.opts.builtin() {
		// A built-in kind cannot be registered in the config: the host
		// finds it beside its own binary. So this host gets a directory
		// holding taskhost (a hard link, or a copy) and the executor.
		bin := filepath.Join(dir, "bin")
		h.taskhost = filepath.Join(bin, "taskhost")
		// 0755 like an install dir: a root host runs its plugins under
		// uids of their own, which reach the executor by path only
		// through the "others" bits.
		if err := os.Mkdir(bin, 0o755); err != nil {
			t.Fatalf("executortest: %v", err)
		}
		if err := linkOrCopy(k.taskhost, h.taskhost); err != nil {
			t.Fatalf("executortest: place taskhost beside the executor: %v", err)
		}
	}
	if err := h.install(binary); err != nil {
		t.Fatalf("executortest: %v", err)
	}
	return h
}

// install makes binary the executor of the host's kind, replacing any
// earlier one.
func (h *host) install(binary string) error {
	opts := &h.k.opts
	var b strings.Builder
	b.WriteString("# Generated by github.com/taskhost/taskhost/sdk/executortest for one check.\n\n")
	fmt.Fprintf(&b, "[limits]\nplugin_stop_grace_seconds = %d\n\n", kitStopGraceSeconds)
	if opts.builtin() {
		h.plugin = filepath.Join(filepath.Dir(h.taskhost), "taskhost-executor-"+opts.Kind)
		if err := os.Remove(h.plugin); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(binary, h.plugin); err != nil {
			return err
		}
	} else {
		sum, err := h.k.sha256(binary)
		if err != nil {
			return err
		}
		h.plugin = binary
		fmt.Fprintf(&b, "[executors.%s]\npath = %s\nsha256 = %q\n", opts.Kind, tomlString(binary), sum)
		if in := opts.Interpreted; in != nil {
			keys, err := in.config(h.k)
			if err != nil {
				return err
			}
			h.plugin = in.Interpreter // its argv[0]
			b.WriteString(keys)
		}
		b.WriteString("\n")
	}
	if opts.Config != "" {
		b.WriteString("# Options.Config:\n" + opts.Config + "\n")
	}
	return os.WriteFile(h.config, []byte(b.String()), 0o600)
}

// writeSpec writes the spec of scenario to a file for --spec-file.
func (h *host) writeSpec(scenario string, spec map[string]any) (string, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("spec of scenario %q: %w", scenario, err)
	}
	f, err := os.CreateTemp(h.specs, scenario+"-*.json")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}

// session is one `taskhost run --json` process.
type session struct {
	h       *host
	cmd     *exec.Cmd
	started time.Time
	stderr  *lockedTail

	mu      sync.Mutex
	lines   []runLine
	changed chan struct{} // closed and replaced when a line arrives or stdout ends
	eof     bool

	exited   chan struct{}
	exitedAt time.Time
	exitCode int
	waitErr  error

	cursor int // the next line waitLine looks at; the test goroutine's own
	// scenario is the scenario of the session's task, for the messages
	// of the input check; the test goroutine's own.
	scenario string
}

// start starts `taskhost run` with the kit's flags and args. The process
// is killed when the test ends, should it still run.
func (h *host) start(ctx context.Context, t *testing.T, args ...string) (*session, error) {
	t.Helper()
	full := append([]string{"run", "--data-dir", h.dataDir, "--config", h.config, "--json", "--approve-all", "--log-level", "warn"}, args...)
	cmd := exec.CommandContext(ctx, h.taskhost, full...)
	cmd.WaitDelay = 5 * time.Second
	s := &session{h: h, cmd: cmd, stderr: &lockedTail{max: 64 << 10}, changed: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", h.taskhost, err)
	}
	go s.read(out)
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = cmd.Process.Kill()
			<-s.exited
		}
	})
	return s, nil
}

func (s *session) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var l runLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			l = runLine{Kind: "unparsed: " + text.Clip(sc.Text(), 200)}
		}
		l.read = time.Now()
		s.mu.Lock()
		s.lines = append(s.lines, l)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, out)
	s.mu.Lock()
	s.eof = true
	close(s.changed)
	s.mu.Unlock()
	s.waitErr = s.cmd.Wait()
	s.exitedAt = time.Now()
	s.exitCode = s.cmd.ProcessState.ExitCode()
	close(s.exited)
}

// waitLine returns the next line for which match holds. It fails when
// taskhost ends first, or ctx does.
func (s *session) waitLine(ctx context.Context, what string, match func(runLine) bool) (runLine, error) {
	return s.scan(ctx, what, &s.cursor, match)
}

// taskID is the id of the session's task, from its first line.
func (s *session) taskID(ctx context.Context) (string, error) {
	pos := 0
	l, err := s.scan(ctx, "the line naming the task", &pos, func(l runLine) bool { return l.Kind == "task" && l.Task != nil })
	if err != nil {
		return "", err
	}
	return l.Task.ID, nil
}

// scan looks at the lines from *pos on, as they arrive, for one for which
// match holds, and leaves *pos after it.
func (s *session) scan(ctx context.Context, what string, pos *int, match func(runLine) bool) (runLine, error) {
	for {
		s.mu.Lock()
		for *pos < len(s.lines) {
			l := s.lines[*pos]
			*pos++
			if match(l) {
				s.mu.Unlock()
				return l, nil
			}
		}
		eof, changed := s.eof, s.changed
		s.mu.Unlock()
		if eof {
			if _, err := s.wait(ctx); err != nil {
				return runLine{}, fmt.Errorf("waiting for %s: %w", what, err)
			}
			return runLine{}, fmt.Errorf("taskhost ended before %s: %s", what, s.diagnosis())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return runLine{}, fmt.Errorf("waiting for %s: %w; %s", what, ctx.Err(), s.diagnosis())
		}
	}
}

// wait waits for taskhost to exit and returns its exit code.
func (s *session) wait(ctx context.Context) (int, error) {
	select {
	case <-s.exited:
	case <-ctx.Done():
		return -1, fmt.Errorf("taskhost did not exit: %w", ctx.Err())
	}
	if s.exitCode < 0 {
		return -1, fmt.Errorf("taskhost died: %v; stderr: %s", s.waitErr, s.stderr)
	}
	return s.exitCode, nil
}

// final is the task as taskhost printed it at the end, if it did.
func (s *session) final() *taskView {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.lines) - 1; i >= 0; i-- {
		if s.lines[i].Kind == "result" {
			return s.lines[i].Task
		}
	}
	return nil
}

// diagnosis says how taskhost ended, for a failure message.
func (s *session) diagnosis() string {
	var b strings.Builder
	select {
	case <-s.exited:
		fmt.Fprintf(&b, "taskhost exited with code %d", s.exitCode)
	default:
		b.WriteString("taskhost is still running")
	}
	if t := s.final(); t != nil {
		fmt.Fprintf(&b, ", task %s", t)
	}
	if e := s.stderr.String(); e != "" {
		fmt.Fprintf(&b, "; its stderr:\n%s", indent(text.Clip(e, 4000)))
	}
	return b.String()
}

// run runs `taskhost run` to its end.
func (h *host) run(ctx context.Context, t *testing.T, args ...string) (*session, int, error) {
	t.Helper()
	s, err := h.start(ctx, t, args...)
	if err != nil {
		return nil, -1, err
	}
	code, err := s.wait(ctx)
	return s, code, err
}

// startScenario starts a task of scenario.
func (h *host) startScenario(ctx context.Context, t *testing.T, scenario string, args ...string) (*session, error) {
	t.Helper()
	spec, err := h.k.spec(scenario)
	if err != nil {
		return nil, err
	}
	file, err := h.writeSpec(scenario, spec)
	if err != nil {
		return nil, err
	}
	full := []string{"--executor", h.k.opts.Kind, "--spec-file", file}
	if h.k.opts.Files != nil {
		seeds, err := h.writeFiles(h.k.opts.Files(scenario))
		if err != nil {
			return nil, fmt.Errorf("Options.Files(%q): %w", scenario, err)
		}
		full = append(full, seeds...)
	}
	in, err := h.inputArgs(scenario, 0)
	if err != nil {
		return nil, errInputs(scenario, err)
	}
	s, err := h.start(ctx, t, append(append(full, in...), args...)...)
	if err != nil {
		return nil, err
	}
	s.scenario = scenario
	return s, nil
}

// writeFiles writes files for `taskhost run --file SRC=NAME` and returns
// those flags, in name order.
func (h *host) writeFiles(files map[string][]byte) ([]string, error) {
	var flags []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f, err := os.CreateTemp(h.specs, "file-*")
		if err != nil {
			return nil, err
		}
		if _, err := f.Write(files[name]); err != nil {
			_ = f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		// taskhost splits the flag at its first '=': the source path
		// must not hold one.
		if strings.Contains(f.Name(), "=") {
			return nil, fmt.Errorf("the kit's scratch path %s holds '=': set TMPDIR to a directory without one", f.Name())
		}
		flags = append(flags, "--file", f.Name()+"="+name)
	}
	return flags, nil
}

// inspect reads a task and its attempts with `taskhost inspect --json`.
func (h *host) inspect(ctx context.Context, id string) (inspectView, error) {
	cmd := exec.CommandContext(ctx, h.taskhost, "inspect", "--data-dir", h.dataDir, "--json", "--effects", id)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return inspectView{}, fmt.Errorf("taskhost inspect %s: %w: %s", id, err, strings.TrimSpace(stderr.String()))
	}
	var v inspectView
	if err := json.Unmarshal(out, &v); err != nil {
		return inspectView{}, fmt.Errorf("taskhost inspect %s: unexpected output: %w", id, err)
	}
	return v, nil
}

// sha256 returns the hex SHA-256 of a file, as sha256sum prints it.
func (k *kit) sha256(path string) (string, error) {
	if sum, ok := k.sums[path]; ok {
		return sum, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	k.sums[path] = sum
	return sum, nil
}

// linkOrCopy makes dst a hard link of src, or a copy where links fail
// (another file system, a file of another user).
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

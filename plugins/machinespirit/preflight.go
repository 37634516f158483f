package machinespirit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/internal/confine"
)

// Bounds of the preflight. Start-up is ~30 ms from a saved state; these
// only stop a broken runtime from hanging the plugin's start.
const (
	versionTimeout   = 5 * time.Second
	buildTimeout     = 60 * time.Second
	helloTimeout     = 10 * time.Second
	maxGraphFileSize = 64 << 10
	maxToolOutput    = 4 << 10
)

// preflightError names the check that failed; Describe reports it as
// "failed: <check>: <why>".
type preflightError struct {
	check string
	err   error
}

func (e *preflightError) Error() string { return e.check + ": " + e.err.Error() }
func (e *preflightError) Unwrap() error { return e.err }

func failCheck(check string, format string, args ...any) error {
	return &preflightError{check: check, err: fmt.Errorf(format, args...)}
}

var (
	pinnedVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	versionLineRE   = regexp.MustCompile(`^SWI-Prolog version ([0-9]+\.[0-9]+\.[0-9]+) for (\S+)$`)
	sha256HexRE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// opGraph is an operator's graph file, verified against its pin. Its
// bytes are kept: every worker loads exactly what was hashed.
type opGraph struct {
	name   string
	source string
}

// runtimeEnv is what the preflight established: how to start a worker.
type runtimeEnv struct {
	dir  string // private temp dir: staged sources, saved state
	work string // the worker's working directory: dir/work, empty
	// trampoline and policy confine every worker (confine.Command).
	trampoline  string
	policy      confine.Policy
	path        string
	args        []string
	env         []string
	version     string // the version swipl reported
	versionLine string // all of what swipl --version printed
	graphs      []string
	opGraphs    []opGraph
	opModules   []opModule

	// StartFromState: the worker's saved state, the cache it may come
	// from (nil: none) and its key there, and how it was obtained
	// (stateBuilt, stateCached or stateRebuilt).
	state     string
	cache     *stateCache
	stateKey  string
	stateFrom string
}

// checkBinary: absolute, exists, a regular file, executable by us.
func checkBinary(path string) error {
	if path == "" {
		return failCheck("swipl_path", "no path given (--swipl)")
	}
	if !filepath.IsAbs(path) {
		return failCheck("swipl_path", "%q is not an absolute path", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return failCheck("swipl_path", "%w", err)
	}
	if !fi.Mode().IsRegular() {
		return failCheck("swipl_path", "%s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return failCheck("swipl_executable", "%s is not executable (mode %v)", path, fi.Mode().Perm())
	}
	if err := unix.Access(path, unix.X_OK); err != nil {
		return failCheck("swipl_executable", "%s is not executable by this process: %w", path, err)
	}
	return nil
}

// checkVersion runs `swipl --version` and requires exactly the pinned
// version. It returns the version found and the whole line.
func checkVersion(ctx context.Context, path, pinned string, env []string) (version, line string, err error) {
	if !pinnedVersionRE.MatchString(pinned) {
		return "", "", failCheck("swipl_version", "pinned version %q is not X.Y.Z (--swipl-version)", truncate(pinned, 40))
	}
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	out, err := runBounded(ctx, path, []string{"--version"}, env, "")
	if err != nil {
		return "", "", failCheck("swipl_version", "%s --version: %w", path, err)
	}
	line = strings.TrimSpace(out)
	m := versionLineRE.FindStringSubmatch(line)
	if m == nil {
		return "", "", failCheck("swipl_version", "unexpected output of %s --version: %q", path, truncate(line, 200))
	}
	if m[1] != pinned {
		return m[1], line, failCheck("swipl_version", "%s is SWI-Prolog %s, pinned %s", path, m[1], pinned)
	}
	return m[1], line, nil
}

// runBounded runs a short command and returns its combined output, cut to
// maxToolOutput bytes.
func runBounded(ctx context.Context, path string, args, env []string, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	cmd.Dir = dir
	var out limitedBuffer
	out.max = maxToolOutput
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	exited, err := startOnOwnThread(cmd)
	if err == nil {
		err = <-exited
	}
	if err != nil {
		if ctx.Err() != nil {
			return out.String(), fmt.Errorf("timed out: %w", ctx.Err())
		}
		return out.String(), fmt.Errorf("%w; output: %s", err, truncate(strings.TrimSpace(out.String()), 1000))
	}
	return out.String(), nil
}

type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// workerEnv is the whole environment of swipl: nothing of the plugin's
// own environment (which a host might have filled with secrets) passes.
func workerEnv(dir string) []string {
	return []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + dir, "TMPDIR=" + dir}
}

// prepareRuntime stages the sources in a private temp dir (StartFromSource)
// or puts the worker's saved state there (StartFromState): from the
// saved-state cache when it holds a verified one, else built.
func prepareRuntime(ctx context.Context, cfg Config, src sourceSet, env *runtimeEnv) error {
	workerOpts := []string{
		"--max-frame-bytes=" + strconv.Itoa(cfg.MaxFrameBytes),
		"--stack-limit-bytes=" + strconv.FormatInt(cfg.StackLimitBytes, 10),
		"--task-stack-limit-bytes=" + strconv.FormatInt(cfg.TaskStackLimitBytes, 10),
	}
	if cfg.RLMGoalMode {
		workerOpts = append(workerOpts, "--rlm-goal-mode=1")
	}
	if cfg.StartMode == StartFromSource {
		if err := src.stage(env.dir); err != nil {
			return failCheck("sources", "%w", err)
		}
		files := append([]string{filepath.Join(env.dir, mainSource)}, prefixAll(env.dir, src.extras())...)
		env.args = append(append([]string{"--no-packs", "-q", "--no-tty"}, files...), append([]string{"--"}, workerOpts...)...)
		return nil
	}
	env.state = filepath.Join(env.dir, "worker.state")
	env.args = append([]string{"-x", env.state, "--no-tty", "--"}, workerOpts...)
	if env.cache != nil {
		payload, err := env.cache.load(env.stateKey)
		switch {
		case err == nil:
			if err := os.WriteFile(env.state, payload, 0o400); err != nil {
				return failCheck("saved_state", "copying the cached saved state: %w", err)
			}
			env.stateFrom = stateCached
			return nil
		case errors.Is(err, fs.ErrNotExist):
		default:
			cfg.Logger.Warn("saved-state cache entry not used; building it again", "error", err)
			env.stateFrom = stateRebuilt
		}
	}
	return buildState(ctx, cfg, src, env)
}

// buildState compiles the sources into env.state and, with a cache,
// stores the result there for the next start. A failure to cache is
// logged: the state built is as good.
func buildState(ctx context.Context, cfg Config, src sourceSet, env *runtimeEnv) error {
	if err := src.stage(env.dir); err != nil {
		return failCheck("sources", "%w", err)
	}
	files := append([]string{filepath.Join(env.dir, mainSource)}, prefixAll(env.dir, src.extras())...)
	// A cached state that did not load is there read-only (0400).
	if err := os.Remove(env.state); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return failCheck("saved_state", "%w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	args := append([]string{"--no-packs", "-q", "-o", env.state, "-c"}, files...)
	if _, err := runBounded(bctx, env.path, args, env.env, env.dir); err != nil {
		return failCheck("saved_state", "building the saved state: %w", err)
	}
	if fi, err := os.Stat(env.state); err != nil || fi.Size() == 0 {
		return failCheck("saved_state", "swipl wrote no saved state")
	}
	if env.stateFrom == "" {
		env.stateFrom = stateBuilt
	}
	if env.cache == nil {
		return nil
	}
	payload, err := readSmallFile(env.state, env.cache.max)
	if err == nil {
		err = env.cache.store(env.stateKey, payload)
	}
	if err != nil {
		cfg.Logger.Warn("saved state not cached", "error", err)
		return nil
	}
	env.cache.prune(env.stateKey)
	return nil
}

func prefixAll(dir string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = filepath.Join(dir, n)
	}
	return out
}

// readOperatorGraphs reads each pinned graph file DIR/NAME.pl and checks
// its SHA-256. A pin without a file, a file that does not match its pin, or
// a pin without a directory fails the preflight: an operator who pinned a
// graph expects it to be there, exactly.
func readOperatorGraphs(dir string, pins map[string]string) ([]opGraph, error) {
	if len(pins) == 0 {
		return nil, nil
	}
	if dir == "" {
		return nil, failCheck("graph_pin", "graph pins given without --graphs-dir")
	}
	var out []opGraph
	for _, name := range slices.Sorted(maps.Keys(pins)) {
		want := pins[name]
		if !validGraphID(name) {
			return nil, failCheck("graph_pin", "%q is not a graph id", truncate(name, 80))
		}
		if !sha256HexRE.MatchString(want) {
			return nil, failCheck("graph_pin", "%s: pin %q is not a lowercase hex SHA-256", name, truncate(want, 80))
		}
		path := filepath.Join(dir, name+".pl")
		b, err := readSmallFile(path, maxGraphFileSize)
		if err != nil {
			return nil, failCheck("graph_pin", "%s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			return nil, failCheck("graph_pin", "%s: %s has SHA-256 %s, pinned %s", name, path, got, want)
		}
		out = append(out, opGraph{name: name, source: string(b)})
	}
	return out, nil
}

// readSmallFile reads a regular file of at most max bytes.
func readSmallFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s exceeds %d bytes", path, max)
	}
	return b, nil
}

// checkHello validates the worker's hello frame: protocol, version,
// libraries, and that every shipped graph compiled.
func checkHello(f *inFrame, pinned string) ([]string, error) {
	if f.Type != "hello" {
		return nil, failCheck("hello", "first frame is %q, want hello", f.Type)
	}
	if f.Protocol != protocolVersion {
		return nil, failCheck("hello", "worker speaks protocol %d, want %d", f.Protocol, protocolVersion)
	}
	if f.PrologVersion != pinned {
		return nil, failCheck("hello", "worker runs SWI-Prolog %s, pinned %s", truncate(f.PrologVersion, 40), pinned)
	}
	if len(f.Missing) > 0 {
		return nil, failCheck("libraries", "required libraries missing: %s", truncate(strings.Join(f.Missing, ", "), 300))
	}
	if len(f.Errors) > 0 {
		return nil, failCheck("graphs", "shipped graphs do not compile: %s", truncate(strings.Join(f.Errors, "; "), 1000))
	}
	var ids []string
	for _, g := range f.Graphs {
		ids = append(ids, g.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

// helloWorker starts a worker, checks its hello and loads the operator
// graphs into it. Every worker goes through it, not only the preflight's.
func helloWorker(ctx context.Context, cfg Config, env *runtimeEnv) (*worker, []string, error) {
	w, err := startWorker(ctx, workerSpec{
		path: env.path, args: env.args, env: env.env,
		trampoline: env.trampoline, policy: env.policy,
		maxFrame: cfg.MaxFrameBytes, logger: cfg.Logger,
	})
	if err != nil {
		return nil, nil, failCheck("worker_start", "%w", err)
	}
	fail := func(err error) (*worker, []string, error) {
		w.kill(cfg.KillGrace)
		if tail := w.stderr.String(); tail != "" {
			err = fmt.Errorf("%w (worker stderr: %s)", err, truncate(tail, 1000))
		}
		return nil, nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	f, err := w.recv(hctx)
	if err != nil {
		return fail(failCheck("hello", "no hello from the worker: %w (%s)", err, w.exitDescription()))
	}
	ids, err := checkHello(f, cfg.SwiplVersion)
	if err != nil {
		return fail(err)
	}
	if err := limitAddressSpace(w.pid, cfg.WorkerMemoryBytes); err != nil {
		return fail(failCheck("confine", "%w", err))
	}
	if err := loadHandlerModules(hctx, w, env.opModules); err != nil {
		return fail(err)
	}
	for i, g := range env.opGraphs {
		id := int64(len(env.opModules) + i + 1)
		if err := w.send(loadGraphFrame{Type: "load_graph", ID: id, Name: g.name, Source: g.source}); err != nil {
			return fail(failCheck("graph_pin", "%s: %w", g.name, err))
		}
		f, err := w.recv(hctx)
		if err != nil {
			return fail(failCheck("graph_pin", "%s: %w", g.name, err))
		}
		if f.Type != "graph_loaded" || f.ID == nil || *f.ID != id {
			return fail(failCheck("graph_pin", "%s: unexpected %s frame", g.name, f.Type))
		}
		if !*f.OK {
			return fail(failCheck("graph_pin", "%s: %s: %s", g.name, f.Code, truncate(f.Message, 500)))
		}
		ids = append(ids, g.name)
	}
	slices.Sort(ids)
	return w, ids, nil
}

// runtimeDirPrefix starts the name of a plugin's private temp dir, followed
// by the plugin's pid: a plugin killed outright (SIGKILL, or the SDK's
// stop) leaves its dir behind, and the next plugin removes those whose
// process is gone.
const runtimeDirPrefix = "taskhost-machinespirit-"

// sweepRuntimeDirs removes the runtime dirs of plugins that are no longer
// running. A dir whose pid is alive (or reused) is left alone: at worst a
// stale dir waits for a later sweep.
func sweepRuntimeDirs(logger hclog.Logger) {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, ent := range entries {
		rest, ok := strings.CutPrefix(ent.Name(), runtimeDirPrefix)
		if !ok || !ent.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(tmp, ent.Name())); err != nil {
			logger.Warn("removing a stale runtime dir", "dir", ent.Name(), "error", err)
		}
	}
}

// errNoPreflight is what Step reports when the preflight failed.
var errNoPreflight = errors.New("the SWI-Prolog runtime failed its preflight")

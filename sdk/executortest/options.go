package executortest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/taskhost/taskhost/internal/text"
)

// Scenarios are the tasks the kit asks Options.Spec for. Each is a task
// spec (goal and executor options) that makes the executor behave a certain
// way; the kit never looks inside it except to add a goal when it has none.
const (
	// ScenarioComplete completes in a few steps, at least 2, so that one
	// step runs without a checkpoint and later ones with one.
	ScenarioComplete = "complete"
	// ScenarioLong keeps returning Continue for at least 3 steps.
	ScenarioLong = "long"
	// ScenarioSlow has a first step that takes at least 2 s and returns
	// promptly when its context is cancelled.
	ScenarioSlow = "slow"
	// ScenarioCrash completes in at least 3 steps, and its second step
	// takes at least 2 s: the kit SIGKILLs the plugin, and the host, during
	// that step. Run uninterrupted it must take the same number of steps
	// every time. A tool call with a side effect in step 2, before its slow
	// part, gives the effect count something to count.
	ScenarioCrash = "crash"
	// ScenarioOversized completes with a result over 64 KiB.
	ScenarioOversized = "oversized"
	// ScenarioDeterministic (optional) completes, with the same steps and
	// result every time it runs.
	ScenarioDeterministic = "deterministic"
)

// Checks are the names of the kit's subtests, for Options.Skip.
const (
	CheckDescribe            = "describe"
	CheckComplete            = "complete"
	CheckCancel              = "cancel"
	CheckResultTooLarge      = "result_too_large"
	CheckStepBudget          = "step_budget"
	CheckCrashResume         = "crash_resume"
	CheckHostCrashResume     = "host_crash_resume"
	CheckCheckpointRoundTrip = "checkpoint_round_trip"
	CheckSchemaUpgrade       = "schema_upgrade"
	CheckDeterminism         = "determinism"
)

// allChecks lists the checks in the order Run runs them.
func allChecks() []string {
	return []string{
		CheckDescribe, CheckComplete, CheckCancel, CheckResultTooLarge, CheckStepBudget,
		CheckCrashResume, CheckHostCrashResume, CheckCheckpointRoundTrip, CheckSchemaUpgrade, CheckDeterminism,
	}
}

// Options say what to test and how.
type Options struct {
	// Binary is the executor binary under test, as built (required).
	Binary string
	// Kind is the executor's kind as its Describe reports it (required).
	// The kit registers Binary under this name.
	Kind string
	// TaskhostBin is the taskhost binary that hosts the runs. Empty: the
	// TASKHOST_BIN environment variable, else "taskhost" on PATH.
	TaskhostBin string
	// Spec returns the task spec of a scenario (see the Scenario
	// constants), or nil when the executor has none. A spec without a
	// "goal" gets one.
	Spec func(scenario string) map[string]any
	// Files returns the files to place in the workspace of a scenario's
	// task before its first step, as `taskhost run --file` does: name (a
	// clean relative slash-separated path) → content. Nil, or a nil map,
	// seeds nothing. At most 16 files of at most 16 MiB together per
	// scenario, names of at most 255 bytes; the kit checks every scenario's
	// files before it runs any check.
	Files func(scenario string) map[string][]byte
	// Config is TOML appended to the config the kit generates, e.g. a
	// [model] section with a script. It must not define [limits] or this
	// kind's [executors.KIND]: the kit writes those.
	Config string
	// OldBinary, when set, is a build of an earlier release of the
	// executor. The schema_upgrade check interrupts a task run by it and
	// resumes the task with Binary, which must accept the old checkpoint.
	// BuildAt builds one from a git ref.
	OldBinary string
	// Skip lists checks (the Check constants) the executor opts out of;
	// each needs a reason in SkipReasons, which the test log shows.
	Skip        []string
	SkipReasons map[string]string
	// Timeout bounds each check, all the taskhost commands it runs
	// included; default 2 min.
	Timeout time.Duration

	// Result, when set, returns what the result of a scenario's
	// completed task must be: a func that returns an error saying how the
	// result differs, ResultEquals's or your own; nil for a scenario whose
	// result is not checked. The kit checks it wherever a task of the
	// scenario completes: uninterrupted, and after each crash and resume.
	Result func(scenario string) func(result json.RawMessage) error
	// Inputs, when set, returns the answers the kit gives, in order, to
	// the input questions (host.RequestInput) a scenario's task asks:
	// each value is marshalled to one JSON value of at most 64 KiB, at
	// most 64 of them per scenario. A question past the answers fails the
	// check, naming it. Nil for a scenario (or a nil Inputs) answers every
	// question with null, as --approve-all does.
	Inputs func(scenario string) []any
	// Interpreted, when set, says Binary and OldBinary are scripts that an
	// interpreter runs (a Python executor, say): the kit pins both.
	Interpreted *Interpreted
}

// allScenarios lists the scenarios, in the order the package documents them.
func allScenarios() []string {
	return []string{ScenarioComplete, ScenarioLong, ScenarioSlow, ScenarioCrash, ScenarioOversized, ScenarioDeterministic}
}

// Bounds of Options.Files, those of `taskhost run --file` (the host's
// limits of a task's seed files).
const (
	maxSeedFiles = 16
	maxSeedBytes = 16 << 20 // all files of a scenario together
	maxSeedName  = 255
)

// checkFiles checks the files of one scenario against the host's rules, so
// that a bad name fails before any check runs, naming the scenario and the
// file, instead of as a refused run deep inside one.
func checkFiles(scenario string, files map[string][]byte) error {
	field := fmt.Sprintf("Options.Files(%q)", scenario)
	if len(files) > maxSeedFiles {
		return fmt.Errorf("%s has %d files, the limit is %d", field, len(files), maxSeedFiles)
	}
	total := 0
	for _, name := range slices.Sorted(maps.Keys(files)) {
		clean := path.Clean(name)
		switch {
		case name == "" || len(name) > maxSeedName:
			return fmt.Errorf("%s: the name %q is %d bytes: a name must be 1 to %d bytes", field, text.Clip(name, 64), len(name), maxSeedName)
		case path.IsAbs(name) || clean != name || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.ContainsRune(name, 0):
			return fmt.Errorf("%s: the name %q is not a clean relative path inside the workspace (such as %q)", field, name, "data/input.txt")
		}
		total += len(files[name])
	}
	if total > maxSeedBytes {
		return fmt.Errorf("%s: the files hold %d bytes together, the limit is %d", field, total, maxSeedBytes)
	}
	return nil
}

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// validate checks the options and fills in defaults. It returns the
// taskhost binary to use.
func (o *Options) validate() (string, error) {
	var errs []error
	if o.Binary == "" {
		errs = append(errs, errors.New("Options.Binary is empty: set it to your executor binary, built by the test (go build -o DIR/NAME ./cmd/...)"))
	} else if abs, err := filepath.Abs(o.Binary); err != nil {
		errs = append(errs, fmt.Errorf("Options.Binary: %w", err))
	} else {
		o.Binary = abs
		if err := o.checkBinary(abs); err != nil {
			errs = append(errs, fmt.Errorf("Options.Binary: %w", err))
		}
	}
	if o.OldBinary != "" {
		if abs, err := filepath.Abs(o.OldBinary); err != nil {
			errs = append(errs, fmt.Errorf("Options.OldBinary: %w", err))
		} else {
			o.OldBinary = abs
			if err := o.checkBinary(abs); err != nil {
				errs = append(errs, fmt.Errorf("Options.OldBinary: %w", err))
			}
		}
	}
	if o.Interpreted != nil {
		errs = append(errs, o.Interpreted.validate())
	}
	if !kindRE.MatchString(o.Kind) {
		errs = append(errs, fmt.Errorf("Options.Kind = %q: set it to the kind your Describe reports (1 to 32 characters: a lowercase letter, then lowercase letters, digits, '_' or '-')", o.Kind))
	}
	if o.Spec == nil {
		errs = append(errs, errors.New("Options.Spec is nil: give a function that returns the task spec of each scenario"))
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Files != nil {
		for _, scenario := range allScenarios() {
			if err := checkFiles(scenario, o.Files(scenario)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if o.Inputs != nil {
		for _, scenario := range allScenarios() {
			if _, err := scriptedInputs(scenario, o.Inputs(scenario)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, name := range o.Skip {
		if !slices.Contains(allChecks(), name) {
			errs = append(errs, fmt.Errorf("Options.Skip: unknown check %q (the checks are %s)", name, strings.Join(allChecks(), ", ")))
		} else if strings.TrimSpace(o.SkipReasons[name]) == "" {
			errs = append(errs, fmt.Errorf("Options.Skip: check %q has no reason in Options.SkipReasons: say why it does not apply", name))
		}
	}
	for _, table := range []string{"limits", "executors." + o.Kind} {
		re := regexp.MustCompile(`(?m)^\s*\[\s*` + regexp.QuoteMeta(table) + `\s*\]`)
		if re.MatchString(o.Config) {
			errs = append(errs, fmt.Errorf("Options.Config defines [%s]: the kit writes that table itself; remove it", table))
		}
	}
	bin, err := o.taskhostBin()
	if err != nil {
		errs = append(errs, err)
	}
	return bin, errors.Join(errs...)
}

func (o *Options) taskhostBin() (string, error) {
	bin := o.TaskhostBin
	if bin == "" {
		bin = os.Getenv("TASKHOST_BIN")
	}
	if bin == "" {
		p, err := exec.LookPath("taskhost")
		if err != nil {
			return "", errors.New("no taskhost binary: set Options.TaskhostBin, or the TASKHOST_BIN environment variable, or put taskhost on PATH " +
				"(build it with: go build -o DIR/taskhost github.com/taskhost/taskhost/cmd/taskhost)")
		}
		bin = p
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", fmt.Errorf("taskhost binary %s: %w", bin, err)
	}
	if err := checkExecutable(abs); err != nil {
		return "", fmt.Errorf("taskhost binary (Options.TaskhostBin, TASKHOST_BIN or PATH): %w", err)
	}
	return abs, nil
}

func (o *Options) skipReason(check string) (string, bool) {
	if !slices.Contains(o.Skip, check) {
		return "", false
	}
	return o.SkipReasons[check], true
}

// Bounds of Options.Inputs, those of `taskhost run --input-values`.
const (
	maxInputs     = 64
	maxInputBytes = 64 << 10 // one answer, as JSON
)

// scriptedInputs marshals a scenario's answers, checking their bounds, so
// that a bad one fails before any check runs. Nil stays nil: no script.
func scriptedInputs(scenario string, values []any) ([]json.RawMessage, error) {
	if values == nil {
		return nil, nil
	}
	field := fmt.Sprintf("Options.Inputs(%q)", scenario)
	if len(values) > maxInputs {
		return nil, fmt.Errorf("%s has %d answers, the limit is %d", field, len(values), maxInputs)
	}
	out := make([]json.RawMessage, 0, len(values))
	for i, v := range values {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%s: answer %d: %w", field, i+1, err)
		}
		if len(b) > maxInputBytes {
			return nil, fmt.Errorf("%s: answer %d is %d bytes as JSON, the limit is %d", field, i+1, len(b), maxInputBytes)
		}
		out = append(out, b)
	}
	return out, nil
}

// ResultEquals returns a check for Options.Result: the result must be the
// JSON of want (compared by meaning: key order and spacing do not count).
// want may be any value json.Marshal takes, a json.RawMessage included.
func ResultEquals(want any) func(result json.RawMessage) error {
	w, err := json.Marshal(want)
	return func(result json.RawMessage) error {
		if err != nil {
			return fmt.Errorf("ResultEquals: the wanted value cannot be marshalled: %w", err)
		}
		if !jsonEqual(result, w) {
			return fmt.Errorf("the result is %s, want %s", text.Clip(string(result), 500), text.Clip(string(w), 500))
		}
		return nil
	}
}

// builtin reports whether Kind is one the host ships. Those cannot be
// registered under [executors.NAME]: the host finds them beside its own
// binary as taskhost-executor-KIND.
func (o *Options) builtin() bool { return o.Kind == "legacy" || o.Kind == "machinespirit" }

// checkBinary checks the executor under test: an executable, or the
// script of an interpreted one.
func (o *Options) checkBinary(path string) error {
	if o.Interpreted != nil {
		return checkScript(path)
	}
	return checkExecutable(path)
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file (mode %s)", path, fi.Mode())
	}
	return nil
}

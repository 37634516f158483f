package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Bounds of what one plugin process may put into the host's log. A line
// longer than maxLogLine is cut (and marked); beyond logBurst lines at once
// and logRate lines a second on average, lines are dropped, counted, and the
// count reported in the log when forwarding resumes or the stream ends. The
// crash tail is kept from every line, dropped or not.
const (
	maxLogLine   = 2048
	logBurst     = 100
	logRate      = 50 // lines per second, refilled continuously
	maxLogFields = 16 // key/value pairs taken from one hclog JSON line
)

// launchLabels names the run a plugin process serves, for its log lines.
type launchLabels struct {
	task string
	run  int64
}

type launchLabelsKey struct{}

// WithLaunchLabels returns ctx carrying the run a launched plugin serves.
func WithLaunchLabels(ctx context.Context, task string, run int64) context.Context {
	return context.WithValue(ctx, launchLabelsKey{}, launchLabels{task: task, run: run})
}

func launchLabelsFrom(ctx context.Context) launchLabels {
	l, _ := ctx.Value(launchLabelsKey{}).(launchLabels)
	return l
}

// pluginLog forwards one plugin process's stderr lines into the host log
// with the task, run, attempt and executor they belong to: an hclog JSON
// line at its own level with its fields, a plain line at INFO (ERROR from a
// panic on). Its methods are called by the one goroutine reading the stream.
type pluginLog struct {
	log hclog.Logger
	// labels name the executor and, once the process serves one, the task
	// and run: a pooled process is given them when it is taken (pool.go).
	labels  atomic.Pointer[[]any]
	attempt atomic.Uint32 // the attempt in flight, set by Step
	now     func() time.Time

	// admit's state, guarded by the tailReader's mu.
	tokens  float64 // rate bucket, at most logBurst
	last    time.Time
	dropped int // lines dropped since the last admitted one

	mu      sync.Mutex // line and end: the process's stderr and go-plugin's relay call them
	inPanic bool
}

func newPluginLog(log hclog.Logger, kind string, l launchLabels) *pluginLog {
	p := &pluginLog{log: log, now: time.Now, tokens: logBurst}
	p.label(kind, l)
	return p
}

// label sets the executor, task and run every later line carries.
func (p *pluginLog) label(kind string, l launchLabels) {
	labels := []any{"executor", kind}
	if l.task != "" {
		labels = append(labels, "task", l.task, "run", l.run)
	}
	p.labels.Store(&labels)
}

// admit takes one line from the rate bucket, or counts it dropped. An
// admitted line carries the count of lines dropped just before it, so the
// report lands in the log where the gap is.
func (p *pluginLog) admit() (ok bool, droppedBefore int) {
	now := p.now()
	if !p.last.IsZero() {
		p.tokens = min(logBurst, p.tokens+now.Sub(p.last).Seconds()*logRate)
	}
	p.last = now
	if p.tokens < 1 {
		p.dropped++
		return false, 0
	}
	p.tokens--
	droppedBefore, p.dropped = p.dropped, 0
	return true, droppedBefore
}

// fields are the labels every forwarded line carries. source=plugin marks
// the line as the plugin's whatever level and text it chose: a plugin can
// write "[ERROR]" or an hclog ERROR line, never one that reads as the
// daemon's own.
func (p *pluginLog) fields(extra ...any) []any {
	f := append(slices.Clip(*p.labels.Load()), "attempt", p.attempt.Load(), "source", "plugin")
	return append(f, extra...)
}

// escapeControls makes a plugin's text one inert line: C0 and C1 controls
// (ESC of a terminal sequence, CR that would overwrite the line before,
// a newline that would start a forged one), DEL and the bidirectional
// overrides are written as \xNN or \uNNNN. Tabs stay.
func escapeControls(s string) string {
	if !strings.ContainsFunc(s, needsEscape) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !needsEscape(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

func needsEscape(r rune) bool {
	return (r < 0x20 && r != '\t') || (r >= 0x7f && r < 0xa0) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// reportDropped logs that n lines were dropped by the rate bound.
func (p *pluginLog) reportDropped(n int) {
	if n == 0 {
		return
	}
	p.log.Warn("plugin stderr lines dropped: over the rate bound", p.fields("dropped_lines", n,
		"max_lines_per_second", logRate, "burst", logBurst)...)
}

// end reports the n lines dropped after the last admitted one.
func (p *pluginLog) end(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reportDropped(n)
}

// line forwards one admitted line; cut says it lost its end to maxLogLine.
func (p *pluginLog) line(l logLine) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reportDropped(l.dropped)
	b := l.b
	if lvl, msg, kv, ok := parseHCLogJSON(b); ok && !l.cut {
		p.log.Log(lvl, escapeControls(msg), p.fields(kv...)...)
		return
	}
	s := escapeControls(strings.ToValidUTF8(string(b), "\uFFFD"))
	var extra []any
	if l.cut {
		s += " …(cut)"
		extra = append(extra, "cut_at_bytes", maxLogLine)
	}
	lvl := hclog.Info
	switch {
	case strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: "):
		p.inPanic = true
		lvl = hclog.Error
	case p.inPanic:
		lvl = hclog.Error
	default:
		for _, pre := range []struct {
			prefix string
			level  hclog.Level
		}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}} {
			if strings.HasPrefix(s, pre.prefix) {
				lvl = pre.level
				s = strings.TrimSpace(s[len(pre.prefix):])
				break
			}
		}
	}
	p.log.Log(lvl, s, p.fields(extra...)...)
}

// reservedLogKeys are the labels the host sets; a plugin's field of the
// same name is renamed so that a plugin cannot pass for another task.
var reservedLogKeys = []string{"executor", "task", "run", "attempt", "source", "@level", "@message", "@timestamp", "@module", "@caller"}

// parseHCLogJSON reads an hclog JSON line: its level, message and up to
// maxLogFields other fields, sorted by key.
func parseHCLogJSON(b []byte) (hclog.Level, string, []any, bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return hclog.NoLevel, "", nil, false
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return hclog.NoLevel, "", nil, false
	}
	msg, ok := m["@message"].(string)
	if !ok {
		return hclog.NoLevel, "", nil, false
	}
	lvl := hclog.Info
	if s, ok := m["@level"].(string); ok {
		if l := hclog.LevelFromString(s); l != hclog.NoLevel && l != hclog.Off {
			lvl = l
		}
	}
	var kv []any
	if mod, ok := m["@module"].(string); ok && mod != "" {
		kv = append(kv, "plugin_module", mod)
	}
	keys := slices.DeleteFunc(slices.Sorted(maps.Keys(m)), func(k string) bool { return strings.HasPrefix(k, "@") })
	if len(keys) > maxLogFields {
		kv = append(kv, "fields_omitted", len(keys)-maxLogFields)
		keys = keys[:maxLogFields]
	}
	for _, k := range keys {
		name := k
		if slices.Contains(reservedLogKeys, k) {
			name = "plugin_" + k
		}
		v := m[k]
		if _, nested := v.(map[string]any); nested {
			v = fmt.Sprint(v)
		}
		if str, ok := v.(string); ok {
			v = escapeControls(str)
		}
		kv = append(kv, escapeControls(name), v)
	}
	return lvl, msg, kv, true
}

package plugin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

const dropMessage = "plugin stderr lines dropped: over the rate bound"

// logCapture is a host logger writing JSON lines into a buffer.
type logCapture struct{ buf bytes.Buffer }

func (c *logCapture) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: &c.buf, Level: hclog.Trace, JSONFormat: true})
}

func (c *logCapture) entries(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(c.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("host log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// forward runs stream through a tailReader with a pluginLog whose clock
// stands still (no refill) and returns the host log's entries.
func forward(t *testing.T, stream string) ([]map[string]any, *tailReader) {
	t.Helper()
	var c logCapture
	pl := newPluginLog(c.logger(), "testexec", launchLabels{task: "t_1", run: 2})
	pl.attempt.Store(3)
	at := time.Unix(1, 0)
	pl.now = func() time.Time { return at }
	tr := newTailReader(io.NopCloser(strings.NewReader(stream)), 20)
	tr.log = pl
	if _, err := io.Copy(io.Discard, tr); err != nil {
		t.Fatal(err)
	}
	return c.entries(t), tr
}

func TestPluginLogLevelsAndLabels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		line      string
		wantLevel string
		wantMsg   string
		wantField map[string]any
	}{
		{name: "hclog json warn", line: `{"@level":"warn","@message":"disk low","@module":"testexec","free":12}`,
			wantLevel: "warn", wantMsg: "disk low", wantField: map[string]any{"free": float64(12), "plugin_module": "testexec"}},
		{name: "hclog json debug", line: `{"@level":"debug","@message":"tick"}`, wantLevel: "debug", wantMsg: "tick"},
		{name: "json without a level is info", line: `{"@message":"hello"}`, wantLevel: "info", wantMsg: "hello"},
		{name: "a plugin cannot pass for another task", line: `{"@level":"info","@message":"m","task":"t_other","run":9}`,
			wantLevel: "info", wantMsg: "m", wantField: map[string]any{"plugin_task": "t_other", "plugin_run": float64(9)}},
		{name: "plain", line: "just words", wantLevel: "info", wantMsg: "just words"},
		{name: "plain with a level prefix", line: "[ERROR] it broke", wantLevel: "error", wantMsg: "it broke"},
		{name: "panic", line: "panic: boom", wantLevel: "error", wantMsg: "panic: boom"},
		{name: "broken json is plain", line: `{"@level":"warn"`, wantLevel: "info", wantMsg: `{"@level":"warn"`},
		{name: "invalid utf-8", line: "a\xffb", wantLevel: "info", wantMsg: "a\uFFFDb"},
		// A plugin cannot write a line that reads as the daemon's own: its
		// level is kept, but source=plugin marks it and cannot be
		// overwritten, and no control sequence survives.
		{name: "a plugin cannot pass for the daemon", line: `{"@level":"error","@message":"store corrupt\u001b[2J\r","source":"daemon"}`,
			wantLevel: "error", wantMsg: `store corrupt\x1b[2J\x0d`, wantField: map[string]any{"source": "plugin", "plugin_source": "daemon"}},
		{name: "plain line with a terminal sequence", line: "[ERROR] taskhost: \x1b]52;c;Zm9v\x07 bidi\u202e", wantLevel: "error",
			wantMsg: `taskhost: \x1b]52;c;Zm9v\x07 bidi\u202e`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := forward(t, tc.line+"\n")
			if len(got) != 1 {
				t.Fatalf("host log has %d entries, want 1: %v", len(got), got)
			}
			e := got[0]
			if e["@level"] != tc.wantLevel || e["@message"] != tc.wantMsg {
				t.Errorf("level %v message %q, want %s %q", e["@level"], e["@message"], tc.wantLevel, tc.wantMsg)
			}
			want := map[string]any{"task": "t_1", "run": float64(2), "attempt": float64(3), "executor": "testexec", "source": "plugin"}
			for k, v := range tc.wantField {
				want[k] = v
			}
			for k, v := range want {
				if e[k] != v {
					t.Errorf("field %s = %v, want %v (entry %v)", k, e[k], v, e)
				}
			}
		})
	}
}

func TestPluginLogPanicTraceIsError(t *testing.T) {
	t.Parallel()
	got, tr := forward(t, "starting\npanic: boom\n\ngoroutine 1 [running]:\nmain.main()\n")
	levels := make([]any, len(got))
	for i, e := range got {
		levels[i] = e["@level"]
	}
	if len(got) != 5 || levels[0] != "info" || levels[1] != "error" || levels[4] != "error" {
		t.Errorf("levels %v, want info then error from the panic on", levels)
	}
	if !strings.Contains(tr.tail(), "panic: boom") {
		t.Errorf("tail %q lost the panic", tr.tail())
	}
}

func TestPluginLogRateBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		lines       int
		wantDropped int
	}{
		{name: "at the burst", lines: logBurst},
		{name: "past the burst", lines: logBurst + 1, wantDropped: 1},
		{name: "a flood", lines: 50 * logBurst, wantDropped: 49 * logBurst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			for i := range tc.lines {
				b.WriteString("line " + strings.Repeat("x", i%7) + "\n")
			}
			got, tr := forward(t, b.String())
			forwarded, dropped := 0, -1
			for _, e := range got {
				if e["@message"] == dropMessage {
					dropped = int(e["dropped_lines"].(float64))
					continue
				}
				forwarded++
			}
			if forwarded != min(tc.lines, logBurst) {
				t.Errorf("forwarded %d lines, want %d", forwarded, min(tc.lines, logBurst))
			}
			switch {
			case tc.wantDropped == 0 && dropped != -1:
				t.Errorf("a drop report of %d lines, want none", dropped)
			case tc.wantDropped > 0 && dropped != tc.wantDropped:
				t.Errorf("drop report says %d lines, want %d", dropped, tc.wantDropped)
			}
			// The crash tail keeps the last lines whether forwarded or not.
			if last := "line " + strings.Repeat("x", (tc.lines-1)%7); !strings.HasSuffix(tr.tail(), last) {
				t.Errorf("tail ends %q, want the last line %q", tr.tail()[max(0, len(tr.tail())-20):], last)
			}
		})
	}
}

func TestPluginLogRefills(t *testing.T) {
	t.Parallel()
	var c logCapture
	pl := newPluginLog(c.logger(), "testexec", launchLabels{})
	at := time.Unix(1, 0)
	pl.now = func() time.Time { return at }
	admitted := 0
	for range logBurst + 10 {
		if ok, _ := pl.admit(); ok {
			admitted++
		}
	}
	at = at.Add(time.Second)
	for range 2 * logRate {
		if ok, _ := pl.admit(); ok {
			admitted++
		}
	}
	if admitted != logBurst+logRate {
		t.Errorf("admitted %d lines, want the burst %d and one second's %d", admitted, logBurst, logRate)
	}
}

func TestPluginLogLineBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		size    int
		wantCut bool
	}{
		{name: "at the limit", size: maxLogLine},
		{name: "past the limit", size: maxLogLine + 1, wantCut: true},
		{name: "far past the limit", size: 64 * maxLogLine, wantCut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, tr := forward(t, strings.Repeat("z", tc.size)+"\nafter\n")
			var msgs []string
			cutReported := false
			for _, e := range got {
				if e["cut_at_bytes"] == float64(maxLogLine) {
					cutReported = true
				}
				msgs = append(msgs, e["@message"].(string))
			}
			if len(msgs) != 2 || msgs[1] != "after" {
				t.Fatalf("forwarded %d lines, want the long one and the next", len(msgs))
			}
			long := msgs[0]
			if tc.wantCut {
				if long != strings.Repeat("z", maxLogLine)+" …(cut)" || !cutReported {
					t.Errorf("long line: %d bytes, cut reported %v; want %d bytes and a mark", len(long), cutReported, maxLogLine)
				}
			} else if long != strings.Repeat("z", tc.size) || cutReported {
				t.Errorf("line at the limit changed: %d bytes, cut reported %v", len(long), cutReported)
			}
			for _, l := range strings.Split(tr.tail(), "\n") {
				if len(l) > maxTailLine {
					t.Errorf("tail line of %d bytes, limit %d", len(l), maxTailLine)
				}
			}
		})
	}
}

func TestPluginLogFieldBound(t *testing.T) {
	t.Parallel()
	fields := map[string]any{"@level": "info", "@message": "many"}
	for i := range maxLogFields + 5 {
		fields["k"+strings.Repeat("a", i)] = i
	}
	line, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := forward(t, string(line)+"\n")
	if len(got) != 1 {
		t.Fatalf("%d entries, want 1", len(got))
	}
	n := 0
	for k := range got[0] {
		if strings.HasPrefix(k, "k") {
			n++
		}
	}
	if n != maxLogFields || got[0]["fields_omitted"] != float64(5) {
		t.Errorf("%d plugin fields kept, omitted %v; want %d and 5", n, got[0]["fields_omitted"], maxLogFields)
	}
}

// Lines dropped in a flood are reported where forwarding resumes, before
// the first line let through again, so the gap shows in place.
func TestPluginLogDropReportSitsAtTheGap(t *testing.T) {
	t.Parallel()
	var c logCapture
	pl := newPluginLog(c.logger(), "testexec", launchLabels{task: "t_1", run: 1})
	at := time.Unix(1, 0)
	pl.now = func() time.Time { return at }
	tr := newTailReader(io.NopCloser(strings.NewReader("")), 20)
	tr.log = pl
	var flood strings.Builder
	for i := range logBurst + 7 {
		fmt.Fprintf(&flood, "flood %d\n", i)
	}
	w := &streamWriter{t: tr}
	if _, err := w.Write([]byte(flood.String())); err != nil {
		t.Fatal(err)
	}
	at = at.Add(time.Second) // the bucket refills
	if _, err := w.Write([]byte("after the gap\n")); err != nil {
		t.Fatal(err)
	}
	got := c.entries(t)
	if len(got) != logBurst+2 {
		t.Fatalf("%d entries, want the burst, a report and the next line", len(got))
	}
	report, next := got[logBurst], got[logBurst+1]
	if report["@message"] != dropMessage || report["dropped_lines"] != float64(7) || next["@message"] != "after the gap" {
		t.Errorf("after the burst: %v then %v; want a report of 7 dropped lines, then the next line", report, next)
	}
}

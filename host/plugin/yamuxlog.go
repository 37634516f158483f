package plugin

import (
	"log"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// teardownQuiet is the logger go-plugin gets. go-plugin multiplexes its
// connection to a plugin with yamux, and yamux logs at ERROR when a write
// meets the connection the host itself just closed to stop the plugin
// ("Failed to write header: … broken pipe"): routine, yet an operator
// alerting on ERROR would be paged for every stopped plugin. Those teardown
// messages are logged at DEBUG; every other yamux line keeps its level.
type teardownQuiet struct{ hclog.Logger }

func (l teardownQuiet) Named(name string) hclog.Logger {
	if name == "yamux" {
		return yamuxLog{l.Logger.Named(name)}
	}
	return teardownQuiet{l.Logger.Named(name)}
}

func (l teardownQuiet) With(args ...any) hclog.Logger { return teardownQuiet{l.Logger.With(args...)} }

// yamuxLog is the "yamux" sub-logger, whose StandardLogger yamux writes to.
type yamuxLog struct{ hclog.Logger }

func (l yamuxLog) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(yamuxWriter{l.Logger}, "", 0)
}

// yamuxWriter logs one yamux line at the level its prefix names ("[ERR]",
// "[WARN]", …, as hclog's InferLevels reads them), a teardown at DEBUG.
type yamuxWriter struct{ log hclog.Logger }

func (w yamuxWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	lvl := hclog.Info
	for _, pre := range []struct {
		prefix string
		level  hclog.Level
	}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERR]", hclog.Error}, {"[ERROR]", hclog.Error}} {
		if rest, ok := strings.CutPrefix(s, pre.prefix); ok {
			lvl, s = pre.level, strings.TrimSpace(rest)
			break
		}
	}
	if lvl > hclog.Debug && teardown(s) {
		lvl = hclog.Debug
	}
	w.log.Log(lvl, s)
	return len(p), nil
}

// teardown reports a yamux message about a connection that was closed
// under it.
func teardown(msg string) bool {
	for _, s := range []string{"broken pipe", "connection reset by peer", "use of closed network connection", "session shutdown", ": EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

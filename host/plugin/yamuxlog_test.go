package plugin

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestYamuxTeardownLoggedAtDebug(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line, want string
	}{
		{"[ERR] yamux: Failed to write header: write unix @->/d/plugins/plugin-dir1/plugin2: write: broken pipe", "[DEBUG]"},
		{"[ERR] yamux: Failed to read header: read unix @->x: read: connection reset by peer", "[DEBUG]"},
		{"[ERR] yamux: keepalive failed: i/o deadline reached", "[ERROR]"},
		{"[WARN] yamux: frame for missing stream: Vsn:0 Type:1 Flags:0 StreamID:3 Length:0", "[WARN]"},
		{"no prefix at all", "[INFO]"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		base := hclog.New(&hclog.LoggerOptions{Name: "taskhost.plugin.legacy", Output: &out, Level: hclog.Trace})
		// go-plugin's way in: Named("yamux"), then a standard logger.
		teardownQuiet{base}.Named("yamux").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print(tt.line)
		got := out.String()
		if !strings.Contains(got, tt.want) || !strings.Contains(got, "taskhost.plugin.legacy.yamux") {
			t.Errorf("%q logged as %q, want level %s under the yamux name", tt.line, got, tt.want)
		}
	}
	// Other sub-loggers and With keep the wrapper, so a deeper yamux is
	// quiet too.
	var out bytes.Buffer
	base := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Trace})
	teardownQuiet{base}.With("k", "v").Named("client").Named("yamux").StandardLogger(nil).Print("[ERR] yamux: Failed to write header: broken pipe")
	if !strings.Contains(out.String(), "[DEBUG]") {
		t.Errorf("through With and Named: %q", out.String())
	}
}

package legacy

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

// TestStepLogFollowsTheHostsSummaryBound: with a host bound on summaries
// below 2000 characters, the context message and the step's summary are
// cut at it, as Zara cuts both at its step_log_chars; with none (an older
// host), or a looser one, both stay at 2000.
func TestStepLogFollowsTheHostsSummaryBound(t *testing.T) {
	long := strings.Repeat("z", 5000)
	cases := []struct {
		name  string
		bound int
		want  int
	}{
		{"older host", 0, 2000},
		{"tighter bound", 300, 300},
		{"one under the default", 1999, 1999},
		{"at the default", 2000, 2000},
		{"looser bound", 20000, 2000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host := legacyHost(&sdktest.Host{CallModelF: func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
				return sdk.ModelResponse{Message: text(long)}, nil
			}})
			req := firstStep("g")
			req.Recent = []sdk.Summary{{Step: 1, Text: long}}
			req.SummaryChars = tc.bound
			res := mustStep(t, host, req)
			_, models, _, _ := snapshot(host)
			if n := utf8.RuneCountInString(models[0].Messages[0].Content); n != tc.want {
				t.Errorf("context has %d characters, want %d", n, tc.want)
			}
			if n := utf8.RuneCountInString(res.Summary); n != tc.want {
				t.Errorf("summary has %d characters, want %d", n, tc.want)
			}
		})
	}
}

package store

import (
	"os"
	"strings"
	"testing"
)

// TestReasonsDocumented checks that docs/reasons.md has a row for every
// reason code of the closed set, and names no task reason the store does
// not know.
func TestReasonsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/reasons.md")
	if err != nil {
		t.Skipf("docs not beside the package: %v", err)
	}
	rows := map[string]bool{}
	for line := range strings.SplitSeq(string(doc), "\n") {
		if code, ok := strings.CutPrefix(line, "| `"); ok {
			if end := strings.IndexByte(code, '`'); end > 0 {
				rows[code[:end]] = true
			}
		}
	}
	for r := range reasons {
		if r != ReasonNone && !rows[string(r)] {
			t.Errorf("docs/reasons.md has no row for the reason %q", r)
		}
	}
	for code := range rows {
		lower := strings.ToLower(code) == code
		if lower && !Reason(code).Valid() {
			t.Errorf("docs/reasons.md documents %q, which is not a reason code of the store", code)
		}
	}
}

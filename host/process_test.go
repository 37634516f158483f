package host

import (
	"io"
	"strings"
	"testing"
)

func TestTailReaderBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("starting\npanic: scripted panic\n\ngoroutine 1 [running]:\n")
	for i := range 500 {
		b.WriteString(strings.Repeat("x", 600) + " frame " + string(rune('a'+i%26)) + "\n")
	}
	b.WriteString("exit status 2")
	tr := newTailReader(io.NopCloser(strings.NewReader(b.String())), 20)
	if _, err := io.Copy(io.Discard, tr); err != nil {
		t.Fatal(err)
	}
	got := tr.tail()
	if len(got) > maxTailBytes {
		t.Errorf("tail is %d bytes, limit %d", len(got), maxTailBytes)
	}
	if !strings.HasPrefix(got, "panic: scripted panic\n...\n") {
		t.Errorf("tail does not lead with the panic line: %.80q", got)
	}
	if !strings.HasSuffix(got, "exit status 2") {
		t.Errorf("tail lost the last line: %q", got[len(got)-40:])
	}
	for _, l := range strings.Split(got, "\n") {
		if len(l) > maxTailLine {
			t.Fatalf("a line of %d bytes, limit %d", len(l), maxTailLine)
		}
	}
}

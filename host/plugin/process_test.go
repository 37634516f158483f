package plugin

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
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

// settle after a crash: the dead plugin's lines already in the pipe are all
// in the tail, yet a write end still held open (a grandchild) never makes
// it wait for EOF; bytes nobody reads hold it only to its bound.
func TestTailReaderSettleDoesNotWaitForHeldPipe(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reader    bool // go-plugin's stderr reader is draining the pipe
		wantAtMin time.Duration
		wantBelow time.Duration
	}{
		// Below the 250 ms a wait for EOF would take, with room for a
		// loaded machine's scheduling.
		{name: "read, write end held", reader: true, wantBelow: 150 * time.Millisecond},
		{name: "unread, write end held", wantAtMin: 250 * time.Millisecond, wantBelow: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			tr := newTailReader(r, 20)
			tr.unread = pipeUnread(r)
			defer tr.Close()
			// The dead plugin's last words, more than one read's worth.
			want := "panic: the last line"
			var b strings.Builder
			for range 200 {
				b.WriteString(strings.Repeat("y", 100) + "\n")
			}
			b.WriteString(want + "\n")
			if _, err := w.WriteString(b.String()); err != nil {
				t.Fatal(err)
			}
			if tc.reader {
				// Small reads, as a line scanner's refills can be.
				go io.CopyBuffer(io.Discard, struct{ io.Reader }{tr}, make([]byte, 64))
			}
			start := time.Now()
			tr.settle(250 * time.Millisecond)
			took := time.Since(start)
			if took < tc.wantAtMin || took >= tc.wantBelow {
				t.Errorf("settle took %v, want [%v, %v)", took, tc.wantAtMin, tc.wantBelow)
			}
			if tc.reader && !strings.Contains(tr.tail(), want) {
				t.Errorf("the tail lost the line written before the exit: %q", tr.tail())
			}
		})
	}
}

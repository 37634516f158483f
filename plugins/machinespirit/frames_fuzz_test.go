package machinespirit

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzDecodeFrame: whatever a worker writes, the decoder answers with a
// frame that passed validation or a protocol error — never a panic, never a
// frame it would refuse on a second look.
func FuzzDecodeFrame(f *testing.F) {
	for _, seed := range []string{
		`{"type":"hello","protocol":1,"prolog_version":"9.0.4","libraries":[],"missing":[],"graphs":[],"errors":[]}`,
		`{"type":"result","outcome":"continue"}`,
		`{"type":"effect","kind":"model","id":1}`,
		`{"type":"pong"}`,
		`{"type":"error","message":"x"}`,
		`{"type":"nonsense"}`,
		`{"type":"result"`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, err := decodeFrame(line)
		if err != nil {
			return
		}
		if fr == nil {
			t.Fatal("no frame and no error")
		}
		if verr := fr.validate(); verr != nil {
			t.Fatalf("decoded a frame that fails validation: %v", verr)
		}
	})
}

// FuzzReadLine: the line reader never returns more than its bound.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("short\n"), 8)
	f.Add(bytes.Repeat([]byte("x"), 100), 16)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max <= 0 || max > 1<<16 {
			return
		}
		line, _ := readLine(bufio.NewReader(bytes.NewReader(data)), max)
		if len(line) > max {
			t.Fatalf("line of %d bytes past the bound %d", len(line), max)
		}
	})
}

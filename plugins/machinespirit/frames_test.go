package machinespirit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestReadLineBound(t *testing.T) {
	t.Parallel()
	const max = 100
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr error
	}{
		{"short", "abc\n", "abc", nil},
		{"at the limit", strings.Repeat("a", max) + "\n", strings.Repeat("a", max), nil},
		{"one past the limit", strings.Repeat("a", max+1) + "\n", "", errFrameTooLarge},
		{"far past the limit, no newline", strings.Repeat("a", 10*max), "", errFrameTooLarge},
		{"clean end", "", "", io.EOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A small buffer makes the reader assemble lines from pieces.
			r := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
			got, err := readLine(r, max)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("readLine = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Run("partial frame at EOF", func(t *testing.T) {
		_, err := readLine(bufio.NewReader(strings.NewReader(`{"type":`)), max)
		var pe *protocolError
		if !errors.As(err, &pe) {
			t.Fatalf("err = %v, want a protocol error", err)
		}
	})
}

func TestEncodeFrameBound(t *testing.T) {
	t.Parallel()
	base := len(`{"type":"ping","id":1,"pad":""}`)
	const max = 200
	if _, err := encodeFrame(pingFrame{Type: "ping", ID: 1, Pad: strings.Repeat("x", max-base)}, max); err != nil {
		t.Fatalf("frame at the limit: %v", err)
	}
	if _, err := encodeFrame(pingFrame{Type: "ping", ID: 1, Pad: strings.Repeat("x", max-base+1)}, max); !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("frame one past the limit: err = %v", err)
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, line string }{
		{"not JSON", `this is not json`},
		{"array", `[1,2]`},
		{"trailing data", `{"type":"pong","id":1} {}`},
		{"unknown type", `{"type":"teleport","id":1}`},
		{"unknown field", `{"type":"pong","id":1,"extra":true}`},
		{"pong without id", `{"type":"pong"}`},
		{"unknown effect kind", `{"type":"effect","id":1,"kind":"teleport"}`},
		{"tool effect without arguments", `{"type":"effect","id":1,"kind":"tool","name":"x"}`},
		{"model effect without parent", `{"type":"effect","id":1,"kind":"model","messages":[{"role":"user","content":"x"}]}`},
		{"result with unknown outcome", `{"type":"result","id":1,"outcome":"maybe"}`},
		{"continue without checkpoint", `{"type":"result","id":1,"outcome":"continue","summary":"s"}`},
		{"fail without code", `{"type":"result","id":1,"outcome":"fail"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeFrame([]byte(tc.line))
			var pe *protocolError
			if !errors.As(err, &pe) {
				t.Fatalf("decodeFrame(%s) = %v, want a protocol error", tc.line, err)
			}
		})
	}
}

// TestWorkerFrameBound checks the worker's own bound on frames from the
// plugin: a ping of exactly the limit is answered, one byte more ends the
// worker with a frame_too_large error frame.
func TestWorkerFrameBound(t *testing.T) {
	t.Parallel()
	const max = 4096
	cfg := testConfig(t, nil)
	cfg.MaxFrameBytes = max
	e := newExecutor(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := e.ensureWorker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := len(`{"type":"ping","id":7,"pad":""}`)

	atLimit, err := encodeFrame(pingFrame{Type: "ping", ID: 7, Pad: strings.Repeat("x", max-base)}, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(atLimit) != max+1 {
		t.Fatalf("frame is %d bytes with newline, want %d", len(atLimit), max+1)
	}
	if err := w.sendRaw(atLimit); err != nil {
		t.Fatal(err)
	}
	f, err := w.recv(ctx)
	if err != nil || f.Type != "pong" || *f.ID != 7 {
		t.Fatalf("answer to a frame at the limit: %+v, %v", f, err)
	}

	past := []byte(`{"type":"ping","id":8,"pad":"` + strings.Repeat("x", max-base+1) + "\"}\n")
	if err := w.sendRaw(past); err != nil {
		t.Fatal(err)
	}
	f, err = w.recv(ctx)
	if err != nil || f.Type != "error" || f.Code != "frame_too_large" {
		t.Fatalf("answer to a frame one past the limit: %+v, %v", f, err)
	}
	select {
	case <-w.exited:
	case <-ctx.Done():
		t.Fatal("the worker did not exit after an oversized frame")
	}
}

// TestWorkerRejectsMalformedInput: a frame from the plugin that is not a
// frame ends the worker (the plugin never sends one; the worker must not
// guess).
func TestWorkerRejectsMalformedInput(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	for _, line := range []string{"not json\n", `{"type":"warp","id":1}` + "\n", `{"type":"ping"}` + "\n", `{"type":"ping","id":1} trailing` + "\n"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w, err := e.ensureWorker(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.sendRaw([]byte(line)); err != nil {
			t.Fatal(err)
		}
		f, err := w.recv(ctx)
		if err != nil || f.Type != "error" {
			t.Fatalf("%q: answer %+v, %v; want an error frame", line, f, err)
		}
		<-w.exited
		cancel()
	}
}

// TestModelEffectTools: a model effect names at most 8 distinct tools of
// 1..64 bytes; only a model effect names tools.
func TestModelEffectTools(t *testing.T) {
	t.Parallel()
	names := func(ns ...string) string {
		var q []string
		for _, n := range ns {
			q = append(q, `"`+n+`"`)
		}
		return `{"type":"effect","id":1,"kind":"model","messages":[{"role":"user","content":"q"}],"parent":"","tools":[` + strings.Join(q, ",") + `]}`
	}
	eight := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"}
	for _, tc := range []struct {
		name, frame, wantErr string
	}{
		{"eight", names(eight...), ""},
		{"nine", names(append(eight, "a9")...), "tools: 9 names; at most 8"},
		{"a name of 64 bytes", names(strings.Repeat("a", 64)), ""},
		{"a name of 65 bytes", names(strings.Repeat("a", 65)), "tools[0]: a name of 1..64 bytes, not 65"},
		{"an empty name", names(""), "tools[0]: a name of 1..64 bytes, not 0"},
		{"twice", names("a", "a"), `tools[1]: "a" twice`},
		{"on a tool effect", `{"type":"effect","id":1,"kind":"tool","name":"x","arguments":{},"tools":["x"]}`, "only a model effect names tools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeFrame([]byte(tc.frame))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadInputFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte("x"), n), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const limit = 1000
	atLimit, pastLimit := write("at", limit), write("past", limit+1)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(atLimit, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	if ln, err := netListenUnix(sock); err == nil {
		defer ln.Close()
	} else {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       string // "" = accepted
	}{
		{"at the limit", atLimit, ""},
		{"symlink to a regular file", link, ""},
		{"one byte past the limit", pastLimit, "--spec-file " + pastLimit + ": is 1001 bytes, the limit is 1000"},
		{"/dev/zero", "/dev/zero", "--spec-file /dev/zero: is a character device, not a regular file"},
		{"a FIFO with no writer", fifo, "is a FIFO, not a regular file"},
		{"a directory", dir, "is a directory, not a regular file"},
		{"a socket", sock, "no such device or address"},
		{"missing", filepath.Join(dir, "nope"), "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var data []byte
			var err error
			go func() { data, err = readInputFile("--spec-file", tc.path, limit); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("readInputFile blocked")
			}
			if tc.want == "" {
				if err != nil || len(data) != limit {
					t.Fatalf("got %d bytes, %v; want %d bytes", len(data), err, limit)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// A prompt whose input never comes ends when its context does, without
// deciding; the line typed later goes to the next question.
func TestAskYesNoEndsWithContext(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	var errOut bytes.Buffer
	e := &env{stdout: io.Discard, stderr: &errOut, stdin: r}
	var p prompter
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var yes, answered bool
	go func() { yes, answered = askYesNo(ctx, e, &p, "Approve? [y/N] "); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the prompt did not end with its context")
	}
	if yes || answered || !strings.Contains(errOut.String(), "nothing decided") {
		t.Fatalf("yes=%v answered=%v, stderr %q", yes, answered, errOut.String())
	}
	go w.Write([]byte("y\n")) //nolint:errcheck // read below
	if yes, answered = askYesNo(context.Background(), e, &p, "again? "); !yes || !answered {
		t.Fatalf("the next question lost the answer: yes=%v answered=%v", yes, answered)
	}
}

func netListenUnix(path string) (io.Closer, error) {
	return net.Listen("unix", path)
}

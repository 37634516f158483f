package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// mountTmpfs mounts a small tmpfs of size bytes on a fresh directory, so a
// test can fill a real disk. It skips where mounting is not allowed.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the filesystem is full and returns
// its path; removing it gives the space back.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return path
		}
	}
}

// A write on a full disk is refused as a typed, retryable unavailability
// naming its class; once space is back the same write lands.
func TestWriteOnFullDiskIsUnavailable(t *testing.T) {
	dir := mountTmpfs(t, 4<<20)
	s, err := Open(context.Background(), filepath.Join(dir, "taskhost.db"), Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	runningTask(t, s, "alice", "t1")
	filler := fillDisk(t, dir)

	_, err = s.AppendEvents(ctx, "alice", "t1", 1, NewEvent{Type: "step.progress", Payload: []byte(`{"pad":"` + strings.Repeat("x", 900) + `"}`)})
	// Small commits can still fit in the WAL's last partly used page, so
	// write until one does not.
	for i := 0; err == nil && i < 1000; i++ {
		_, err = s.AppendEvents(ctx, "alice", "t1", 1, NewEvent{Type: "step.progress", Payload: []byte(`{"pad":"` + strings.Repeat("x", 900) + `"}`)})
	}
	var ue *UnavailableError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue) || ue.Class != "disk full" {
		t.Fatalf("write on a full disk: err = %v, want an UnavailableError of class disk full", err)
	}
	if !strings.Contains(err.Error(), "store unavailable: disk full") {
		t.Errorf("message %q does not name the class", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvents(ctx, "alice", "t1", 1, NewEvent{Type: "step.progress", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("write after space came back: %v", err)
	}
}

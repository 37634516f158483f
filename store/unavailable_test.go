package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testfs"
)

// A write on a full disk is refused as a typed, retryable unavailability
// naming its class; once space is back the same write lands.
func TestWriteOnFullDiskIsUnavailable(t *testing.T) {
	t.Parallel()
	dir := testfs.MountTmpfs(t, t.TempDir(), 4<<20)
	s, err := Open(context.Background(), filepath.Join(dir, "taskhost.db"), Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	runningTask(t, s, "alice", "t1")
	filler := testfs.FillDisk(t, dir)

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

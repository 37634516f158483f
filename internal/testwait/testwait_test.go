package testwait

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// goroutine's test.
type recorder struct {
	testing.TB
	failed atomic.Value
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed.Store(format)
	panic(r)
}

func fails(t *testing.T, f func(tb testing.TB)) (msg string) {
	t.Helper()
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
		if v := r.failed.Load(); v != nil {
			msg = v.(string)
		}
	}()
	f(r)
	return ""
}

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if msg := fails(t, func(tb testing.TB) {
		Until(tb, 5*time.Second, "the third poll", func() bool { return n.Add(1) >= 3 })
	}); msg != "" {
		t.Fatalf("Until failed on a condition that comes true: %s", msg)
	}
	if msg := fails(t, func(tb testing.TB) {
		Until(tb, 20*time.Millisecond, "never", func() bool { return false })
	}); !strings.Contains(msg, "timed out") {
		t.Fatalf("Until on a condition that never holds: %q, want a time-out failure", msg)
	}
}

func TestFileAndShortTempDir(t *testing.T) {
	dir := ShortTempDir(t)
	if len(filepath.Join(dir, "taskhost.sock")) > 107 {
		t.Fatalf("socket path in %s too long", dir)
	}
	path := filepath.Join(dir, "f")
	go os.WriteFile(path, []byte("x"), 0o600) //nolint:errcheck // File waits for it
	if got := File(t, path); got != "x" {
		t.Fatalf("File = %q, want x", got)
	}
}

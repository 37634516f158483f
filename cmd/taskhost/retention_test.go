package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeSweeper records the ages it is asked to sweep.
type fakeSweeper struct {
	mu    sync.Mutex
	ages  []time.Duration
	err   error
	swept chan struct{}
}

func (f *fakeSweeper) Sweep(_ context.Context, age time.Duration) (int, error) {
	f.mu.Lock()
	f.ages = append(f.ages, age)
	f.mu.Unlock()
	f.swept <- struct{}{}
	return 3, f.err
}

// The daemon sweeps at once with retention_days as the age, logs a failed
// sweep and goes on, and stops with its context; 0 days never sweeps.
func TestSweepRetention(t *testing.T) {
	for _, tc := range []struct {
		days    int
		err     error
		wantLog string
	}{
		{0, nil, ""},
		{7, nil, "deleted=3 retention_days=7"},
		{3650, errors.New("disk I/O error"), "retention sweep failed"},
	} {
		t.Run(strings.ReplaceAll(tc.wantLog, " ", "_"), func(t *testing.T) {
			var logBuf bytes.Buffer
			var mu sync.Mutex
			log := hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &logBuf}, Level: hclog.Info})
			f := &fakeSweeper{err: tc.err, swept: make(chan struct{}, 1)}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { sweepRetention(ctx, log, f, tc.days); close(done) }()
			if tc.days == 0 {
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("retention_days 0 keeps a sweep loop running")
				}
				cancel()
				if len(f.ages) != 0 {
					t.Fatalf("retention_days 0 swept %v", f.ages)
				}
				return
			}
			select {
			case <-f.swept:
			case <-time.After(5 * time.Second):
				t.Fatal("no sweep at start")
			}
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the sweep loop outlived its context")
			}
			if want := time.Duration(tc.days) * 24 * time.Hour; len(f.ages) != 1 || f.ages[0] != want {
				t.Fatalf("swept ages %v, want one of %v", f.ages, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if !strings.Contains(logBuf.String(), tc.wantLog) {
				t.Fatalf("log %q does not say %q", logBuf.String(), tc.wantLog)
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

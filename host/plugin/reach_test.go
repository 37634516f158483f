package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A pool uid reaches a path only through the "others" bits of it and of
// every directory above it; the check names the dir that blocks and the
// chmod that would fix it.
func TestReachableByPoolUID(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "reach")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	mk := func(rel string, mode os.FileMode, dir bool) string {
		t.Helper()
		p := filepath.Join(base, rel)
		if dir {
			if err := os.Mkdir(p, mode); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	open := mk("open", 0o777, true)
	closed := mk("closed", 0o700, true)
	inClosed := mk("closed/inner", 0o777, true)
	readOnly := mk("ro", 0o755, true)
	prog := mk("prog", 0o755, false)
	secret := mk("secret", 0o750, false)

	tests := []struct {
		name    string
		c       Confinement
		blocker string // "" = reachable
	}{
		{"read_write dir 0777", Confinement{ReadWrite: []string{open}}, ""},
		{"read_write dir 0755", Confinement{ReadWrite: []string{readOnly}}, readOnly},
		{"read_write under a 0700 dir", Confinement{ReadWrite: []string{inClosed}}, closed},
		{"read_only dir 0755", Confinement{ReadOnly: []string{readOnly}}, ""},
		{"read_only program 0755", Confinement{ReadOnly: []string{prog}}, ""},
		{"read_only program 0750", Confinement{ReadOnly: []string{secret}}, secret},
		{"read_only dir 0700", Confinement{ReadOnly: []string{closed}}, closed},
		{"the second path blocks", Confinement{ReadOnly: []string{prog}, ReadWrite: []string{open, inClosed}}, closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.checkReachable()
			if tt.blocker == "" {
				if err != nil {
					t.Fatalf("checkReachable = %v, want nil", err)
				}
				return
			}
			var ue *unreachableError
			if !errors.As(err, &ue) || ue.Blocker != tt.blocker {
				t.Fatalf("checkReachable = %v, want it to name %s", err, tt.blocker)
			}
			if msg := err.Error(); !strings.Contains(msg, "chmod o+") || !strings.Contains(msg, "[executors.KIND] user") {
				t.Errorf("message %q: want the chmod and the user alternative", msg)
			}
		})
	}
	if err := (Confinement{ReadWrite: []string{filepath.Join(base, "missing")}}).checkReachable(); err == nil || !strings.Contains(err.Error(), "read_write path") {
		t.Errorf("a missing path: %v, want an error naming read_write", err)
	}
}

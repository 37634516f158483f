package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/internal/testwait"
)

func TestRequireConfinementFailsClosedWithoutLandlock(t *testing.T) {
	t.Parallel()
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(testwait.ShortTempDir(t), "p"), RequireConfinement: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	spec := PluginSpec{Kind: "testexec", Path: testexecBin(t), Confine: DefaultConfinement()}
	noLandlock := confine.Support{Seccomp: true}
	_, err = launch(context.Background(), reg.forker, spec, reg.opts, noLandlock, NewServicesServer(NoServices{}))
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Check != "confinement" || !strings.Contains(ue.Detail, "none (no Landlock)") {
		t.Fatalf("err = %v, want unavailable (confinement) naming the missing Landlock", err)
	}
	if !strings.Contains(ue.Detail, "[confinement] required = false") {
		t.Errorf("the refusal does not say how to opt out: %s", ue.Detail)
	}
	reg.support = noLandlock
	if got := reg.Confinement("testexec"); got != "none (no Landlock)" {
		t.Errorf("Confinement without Landlock = %q", got)
	}
	// The same launch on this kernel, when it has Landlock, starts.
	if confine.Probe().LandlockABI < 1 {
		t.Skip("the kernel offers no Landlock: the control launch would fail too")
	}
	ec, err := launch(context.Background(), reg.forker, spec, reg.opts, confine.Probe(), NewServicesServer(NoServices{}))
	if err != nil {
		t.Fatalf("control launch: %v", err)
	}
	ec.Stop()
}

func TestPluginPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		c       Confinement
		require bool
		want    func(confine.Policy) bool
	}{
		{"default", DefaultConfinement(), false, func(p confine.Policy) bool {
			return p.DropCaps && p.Seccomp.DenyExec && p.Seccomp.DenyFork && p.Seccomp.DenyPtrace && p.Seccomp.DenyNetwork && p.Landlock == confine.LandlockBestEffort
		}},
		{"subprocesses, required", Confinement{Subprocesses: true}, true, func(p confine.Policy) bool {
			return p.DropCaps && !p.Seccomp.DenyExec && !p.Seccomp.DenyFork && p.Seccomp.DenyPtrace && p.Landlock == confine.LandlockRequired
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pluginPolicy(tt.c, tt.require, "/run/priv", "/run/sock")
			if !tt.want(p) {
				t.Errorf("policy %+v", p)
			}
			for _, rw := range p.ReadWrite {
				if rw != "/run/priv" && rw != "/run/sock" && rw != "/dev/null" {
					t.Errorf("unexpected read-write path %s", rw)
				}
			}
		})
	}
}

func TestPluginUserMustNotBeRoot(t *testing.T) {
	t.Parallel()
	c := Confinement{User: "root"}
	if err := c.resolveUser(); err == nil {
		t.Fatal("a plugin user resolving to uid 0 was accepted")
	}
	c = Confinement{User: "no-such-user-xyz"}
	if err := c.resolveUser(); err == nil {
		t.Fatal("an unknown plugin user was accepted")
	}
}

// A script plugin runs by path with its own dir readable (what it execs
// lives there); pinned, it is refused: its interpreter would read it again
// by path after the pin was checked.
func TestScriptPlugin(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	real := filepath.Join(dir, "testexec-real")
	data, err := os.ReadFile(testexecBin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, data, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "wrapper")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+real+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(dir, "p")})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	c := DefaultConfinement()
	c.Subprocesses = true // the shell execs the real plugin
	spec := PluginSpec{Kind: "testexec", Path: wrapper, Confine: c}
	ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
	if err != nil {
		t.Fatalf("unpinned script: %v", err)
	}
	ec.Stop()
	sum := sha256.Sum256([]byte("#!/bin/sh\nexec " + real + " \"$@\"\n"))
	spec.SHA256 = hex.EncodeToString(sum[:])
	_, err = launch(context.Background(), reg.forker, spec, reg.opts, reg.support, NewServicesServer(NoServices{}))
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Check != "binary" || !strings.Contains(ue.Detail, "is a script") {
		t.Fatalf("pinned script: err = %v, want unavailable (binary) saying it is a script", err)
	}
}

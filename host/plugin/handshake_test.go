package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/taskhost/taskhost/internal/testwait"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// A plugin's handshake line names the address the daemon then dials from
// its own, unconfined process. A plugin that names a TCP listener, or a
// unix socket outside its own socket dir, fails the handshake and the
// daemon never connects there: before, a remote listener received the
// task spec.
func TestHandshakeAddressOutsideSocketDirRefused(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	elsewhere := filepath.Join(testwait.ShortTempDir(t), "s")
	unix, err := net.Listen("unix", elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	var dialed atomic.Int64
	for _, l := range []net.Listener{tcp, unix} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				dialed.Add(1)
				c.Close()
			}
		}()
	}
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(dir, "p")})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for _, c := range []struct{ name, network, addr string }{
		{"tcp", "tcp", tcp.Addr().String()},
		{"unix elsewhere", "unix", elsewhere},
		{"unix via ..", "unix", filepath.Join(dir, "p", "..", "..", filepath.Base(filepath.Dir(elsewhere)), "s")},
	} {
		t.Run(c.name, func(t *testing.T) {
			script := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			line := fmt.Sprintf("1|%d|%s|%s|grpc||true", pb.ProtocolVersion, c.network, c.addr)
			if err := os.WriteFile(script, []byte("#!/bin/sh\necho '"+line+"'\nexec sleep 30\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			conf := DefaultConfinement()
			conf.Subprocesses = true // sleep
			_, err := launch(context.Background(), reg.forker, PluginSpec{Kind: "hostile", Path: script, Confine: conf}, reg.opts, reg.support, NewServicesServer(NoServices{}))
			var ue *UnavailableError
			if !errors.As(err, &ue) || ue.Check != "handshake" || !strings.Contains(ue.Detail, "not a socket in the plugin's own socket dir") {
				t.Fatalf("launch: %v, want unavailable (handshake) naming the address", err)
			}
		})
	}
	if n := dialed.Load(); n != 0 {
		t.Fatalf("the daemon dialed the plugin's chosen address %d times", n)
	}
}

func TestCheckHandshakeAddr(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "plugin123")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		network, addr string
		ok            bool
	}{
		{"unix", sock, true},
		{"unix", dir + "/./plugin123", true},
		{"unix", file, false},
		{"unix", filepath.Join(dir, "missing"), false},
		{"unix", filepath.Join(dir, "sub", "plugin123"), false},
		{"unix", "plugin123", false},
		{"tcp", "127.0.0.1:1", false},
		{"unixgram", sock, false},
	} {
		if err := checkHandshakeAddr(dir, c.network, c.addr); (err == nil) != c.ok {
			t.Errorf("checkHandshakeAddr(%s %s) = %v, want ok %v", c.network, c.addr, err, c.ok)
		}
	}
}

// A plugin built against protocol 1 (the unary Step and go-plugin's
// broker) names version 1 in its handshake line: the host refuses it at the
// handshake, saying which versions met and what to do, instead of
// go-plugin's "incompatible API version".
func TestProtocolV1PluginRefused(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(dir, "p")})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	script := filepath.Join(dir, "v1")
	line := "1|1|unix|" + filepath.Join(dir, "p", "nowhere") + "|grpc||true"
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '"+line+"'\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := DefaultConfinement()
	conf.Subprocesses = true // sleep
	_, err = launch(context.Background(), reg.forker, PluginSpec{Kind: "old", Path: script, Confine: conf}, reg.opts, reg.support, NewServicesServer(NoServices{}))
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Check != "protocol" {
		t.Fatalf("launch: %v, want unavailable (protocol)", err)
	}
	for _, want := range []string{"executor protocol 1", fmt.Sprintf("protocol %d", pb.ProtocolVersion), "rebuild the executor against this taskhost's sdk"} {
		if !strings.Contains(ue.Detail, want) {
			t.Errorf("refusal %q does not say %q", ue.Detail, want)
		}
	}
}

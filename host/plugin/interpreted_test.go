package plugin

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testbin"
	"github.com/taskhost/taskhost/internal/testwait"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// shellInterpreter is the interpreter of the tests that need no Python: a
// script of builtins only runs under the plugin seccomp (no fork, no exec).
const shellInterpreter = "/bin/sh"

func writeFile(t *testing.T, path, data string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A pin mismatch of the interpreter or of the script refuses the executor
// at its launch, naming which of the two and its config key; nothing runs.
func TestInterpretedPinMismatch(t *testing.T) {
	t.Parallel()
	dir := testwait.PluginDir(t)
	mark := filepath.Join(dir, "ran")
	script := writeFile(t, filepath.Join(dir, "plugin.sh"), "echo ran > "+mark+"\n")
	goodScript, goodInterp := fileSHA256(t, script), fileSHA256(t, shellInterpreter)
	hashbang := writeFile(t, filepath.Join(dir, "hashbang"), "#!/bin/sh\necho ran > "+mark+"\n")
	if err := os.Chmod(hashbang, 0o755); err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("0", 64)
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(dir, "p")})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for _, tc := range []struct {
		name                string
		scriptPin, interPin string
		interpreter         string
		check, want         string
	}{
		{"interpreter pin", goodScript, other, shellInterpreter, "checksum", "interpreter: plugin binary " + shellInterpreter + " has SHA-256 " + goodInterp + ", config pins " + other},
		{"script pin", other, goodInterp, shellInterpreter, "checksum", "script " + script + " has SHA-256 " + goodScript + ", config pins " + other + " ([executors.sh] sha256)"},
		{"interpreter missing", goodScript, goodInterp, filepath.Join(dir, "nope"), "binary", "interpreter: plugin binary " + filepath.Join(dir, "nope")},
		{"interpreter is a script", goodScript, fileSHA256(t, hashbang), hashbang, "binary", "interpreter " + hashbang + " is a script"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := PluginSpec{Kind: "sh", Path: script, SHA256: tc.scriptPin, Interpreter: tc.interpreter, InterpreterSHA256: tc.interPin, Confine: DefaultConfinement()}
			spec.Confine.ReadWrite = []string{dir}
			_, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, pb.UnimplementedHostServicesServer{})
			var ue *UnavailableError
			if !errors.As(err, &ue) || ue.Check != tc.check || !strings.Contains(ue.Error(), tc.want) {
				t.Fatalf("launch: %v\nwant unavailable (%s) containing %q", err, tc.check, tc.want)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Fatal("the refused script ran")
			}
		})
	}
}

// The interpreter reads the bytes that were hashed: a copy sealed at the
// hash, which neither a rename nor a rewrite in place of the file changes.
func TestInterpretedScriptCopyIsSealed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeFile(t, filepath.Join(dir, "s.py"), "pinned\n")
	spec := PluginSpec{Kind: "py", Path: script, SHA256: fileSHA256(t, script), Interpreter: shellInterpreter, InterpreterSHA256: fileSHA256(t, shellInterpreter)}
	interp, copied, err := openInterpreted(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer interp.Close()
	defer copied.Close()
	f, err := os.OpenFile(script, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("evil!!\n"), 0); err != nil { // in place: the same inode
		t.Fatal(err)
	}
	f.Close()
	writeFile(t, script+".new", "evil\n")
	if err := os.Rename(script+".new", script); err != nil {
		t.Fatal(err)
	}
	if _, err := copied.Write([]byte("x")); err == nil {
		t.Fatal("the script's copy is writable")
	}
	got, err := io.ReadAll(copied)
	if err != nil || string(got) != "pinned\n" {
		t.Fatalf("the copy holds %q (%v), want the hashed bytes", got, err)
	}
}

// The script's bound: MaxScriptBytes is read, one byte more is refused.
func TestInterpretedScriptBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		size int
		ok   bool
	}{{MaxScriptBytes, true}, {MaxScriptBytes + 1, false}} {
		script := writeFile(t, filepath.Join(dir, "s"), strings.Repeat("#", tc.size))
		interp, copied, err := openInterpreted(PluginSpec{Kind: "py", Path: script, Interpreter: shellInterpreter})
		if tc.ok {
			if err != nil {
				t.Fatalf("%d bytes: %v", tc.size, err)
			}
			interp.Close()
			copied.Close()
			continue
		}
		var ue *UnavailableError
		if !errors.As(err, &ue) || !strings.Contains(ue.Detail, "larger than 16777216 bytes") {
			t.Fatalf("%d bytes: err = %v, want the limit named", tc.size, err)
		}
	}
}

// A link flips between the pinned script and another while the host
// launches the pinned kind, and the other is rewritten in place: the other
// never runs, the pinned one does.
func TestInterpretedScriptSwapRace(t *testing.T) {
	t.Parallel()
	dir := testwait.PluginDir(t)
	evilMark, goodMark := filepath.Join(dir, "evil-ran"), filepath.Join(dir, "good-ran")
	pinned := writeFile(t, filepath.Join(dir, "pinned.sh"), "echo ran > "+goodMark+"\n")
	evil := writeFile(t, filepath.Join(dir, "evil.sh"), "echo ran > "+evilMark+"\n")
	link := filepath.Join(dir, "plugin.sh")
	if err := pointLink(link, pinned); err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(dir, "p"), StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	spec := PluginSpec{Kind: "sh", Path: link, SHA256: fileSHA256(t, pinned), Interpreter: shellInterpreter,
		InterpreterSHA256: fileSHA256(t, shellInterpreter), Confine: DefaultConfinement()}
	spec.Confine.ReadWrite = []string{dir}

	stopFlips := flipLink(t, link, pinned, evil)
	ran, refused := 0, 0
	for range 200 {
		// The pinned script exits before a handshake: its launch fails,
		// having run.
		_, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, pb.UnimplementedHostServicesServer{})
		var ue *UnavailableError
		switch {
		case errors.As(err, &ue) && ue.Check == "checksum":
			refused++
		case errors.As(err, &ue) && ue.Check == "handshake":
			ran++
		default:
			stopFlips()
			t.Fatalf("launch: %v", err)
		}
	}
	stopFlips()
	if _, err := os.Stat(evilMark); err == nil {
		t.Fatalf("the swapped-in script ran (%d ran, %d refused)", ran, refused)
	}
	if _, err := os.Stat(goodMark); err != nil || ran == 0 || refused == 0 {
		t.Fatalf("the pinned script never ran, or the flips never raced the launches: %d ran, %d refused (mark: %v)", ran, refused, err)
	}
	t.Logf("200 launches: %d ran the pinned script, %d refused at the checksum", ran, refused)
}

// pythonWithGRPC is /usr/bin/python3 when it has grpc and protobuf, the
// Python SDK's dependencies; else the test skips, saying why.
func pythonWithGRPC(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Skipf("%s lacks grpc or protobuf (apt-get install python3-grpcio python3-protobuf): %v %s", py, err, out)
	}
	return py
}

// The Python SDK's example, pinned with its interpreter, starts confined
// and describes itself.
func TestInterpretedPythonDescribe(t *testing.T) {
	t.Parallel()
	py := pythonWithGRPC(t)
	dir := testwait.PluginDir(t)
	reg, spec := pynotes(t, dir, py)
	ec, err := launch(context.Background(), reg.forker, spec, reg.opts, reg.support, pb.UnimplementedHostServicesServer{})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Stop()
	d, err := ec.Describe(context.Background())
	if err != nil || d.Kind != "pynotes" || d.ProtocolVersion != 2 || len(d.CheckpointSchemas) == 0 {
		t.Fatalf("Describe = %+v, %v; want kind pynotes, protocol 2, a schema", d, err)
	}
}

// A change of the interpreter on disk, the script untouched, makes Check
// run the preflight again: a pinned interpreter rewritten is then refused,
// named.
func TestInterpretedCheckSeesInterpreterChange(t *testing.T) {
	t.Parallel()
	py := pythonWithGRPC(t)
	dir := testwait.PluginDir(t)
	// A copy of the interpreter that the test may change; it finds its
	// standard library under /usr as the original does.
	data, err := os.ReadFile(py)
	if err != nil {
		t.Fatal(err)
	}
	interp := filepath.Join(dir, "python3")
	if err := os.WriteFile(interp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	reg, spec := pynotes(t, dir, interp)
	ctx := context.Background()
	if err := reg.Register(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Check(ctx, "pynotes"); err != nil {
		t.Fatalf("check, nothing changed: %v", err)
	}
	f, err := os.OpenFile(interp, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0}); err != nil { // in place: same path, same inode
		t.Fatal(err)
	}
	f.Close()
	_, err = reg.Check(ctx, "pynotes")
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Check != "checksum" || !strings.Contains(ue.Detail, "interpreter: plugin binary "+interp) {
		t.Fatalf("check after the interpreter changed: %v; want a pin mismatch naming the interpreter", err)
	}
}

// pynotes stages the Python SDK in dir and returns a registry there and
// the example's spec, pinned with interp.
func pynotes(t *testing.T, dir, interp string) (*Registry, PluginSpec) {
	t.Helper()
	root := filepath.Join(dir, "py")
	if err := testbin.PythonSDK(filepath.Join("..", ".."), root); err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(dir, "p")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	script := filepath.Join(root, "sdk/python/examples/pynotes.py")
	spec := PluginSpec{Kind: "pynotes", Path: script, SHA256: fileSHA256(t, script), Interpreter: interp, InterpreterSHA256: fileSHA256(t, interp),
		Args: []string{"--pythonpath=" + filepath.Join(root, "sdk/python")}, Confine: DefaultConfinement()}
	spec.Confine.ReadOnly = []string{filepath.Join(root, "sdk/python"), filepath.Join(root, "shared/proto/python")}
	return reg, spec
}

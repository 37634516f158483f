package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// buildMarker builds a program that only creates the file mark: the
// "unpinned build" whose running is the failure being tested for.
func buildMarker(t *testing.T, dir, mark string) string {
	t.Helper()
	src := filepath.Join(dir, "marker")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := "package main\n\nimport \"os\"\n\nvar mark string\n\nfunc main() { os.WriteFile(mark, []byte(\"ran\"), 0o600) }\n"
	for name, data := range map[string]string{"go.mod": "module marker\n\ngo 1.26\n", "main.go": prog} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "unpinned")
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.mark="+mark, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the marker program: %v\n%s", err, out)
	}
	return bin
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// pointLink atomically makes link point at target.
func pointLink(link, target string) error {
	tmp := link + ".new"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// A symlink flips between the pinned build and an unpinned one while the
// host launches the pinned kind 1000 times: the unpinned build never runs,
// because the binary is exec'd from the very fd that was hashed.
func TestPinnedBinarySymlinkRace(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	markDir := filepath.Join(dir, "mark")
	if err := os.Mkdir(markDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(markDir, "unpinned-ran")
	unpinned := buildMarker(t, dir, mark)
	pinned := testexecBin(t)
	link := filepath.Join(dir, "plugin")
	if err := pointLink(link, unpinned); err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(PluginOptions{SocketDir: filepath.Join(dir, "p"), StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx := context.Background()
	confinement := DefaultConfinement()
	confinement.ReadWrite = []string{markDir}

	// Control: unpinned, through the same launch path, the marker program
	// runs and leaves its mark — so a run would be seen.
	_, err = launch(ctx, reg.forker, PluginSpec{Kind: "testexec", Path: link, Confine: confinement}, reg.opts, reg.support, pb.UnimplementedHostServicesServer{})
	if err == nil {
		t.Fatal("the marker program completed a plugin handshake")
	}
	testwait.File(t, mark)
	if err := os.Remove(mark); err != nil {
		t.Fatal(err)
	}

	spec := PluginSpec{Kind: "testexec", Path: link, SHA256: fileSHA256(t, pinned), Confine: confinement}
	stopFlips := flipLink(t, link, pinned, unpinned)
	started, refused := 0, 0
	for range 1000 {
		ec, err := launch(ctx, reg.forker, spec, reg.opts, reg.support, pb.UnimplementedHostServicesServer{})
		var ue *UnavailableError
		switch {
		case err == nil:
			started++
			ec.Stop()
		case errors.As(err, &ue) && (ue.Check == "checksum" || ue.Check == "binary"):
			refused++ // hashed while the link pointed at the unpinned build
		default:
			stopFlips()
			t.Fatalf("launch: %v", err)
		}
	}
	flips := stopFlips()
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the unpinned build ran (%d started, %d refused)", started, refused)
	}
	t.Logf("1000 launches: %d started the pinned build, %d refused at the checksum; %d flips", started, refused, flips)
	if started == 0 || refused == 0 {
		t.Errorf("the flips never raced the launches: %d started, %d refused", started, refused)
	}
}

// flipLink points link at a and b in turn until the returned stop is
// called, which returns how often it flipped.
func flipLink(t *testing.T, link, a, b string) (stop func() int64) {
	t.Helper()
	var done atomic.Bool
	var flips atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !done.Load(); i++ {
			target := a
			if i%2 == 1 {
				target = b
			}
			if err := pointLink(link, target); err != nil {
				t.Error(err)
				return
			}
			flips.Add(1)
		}
	}()
	return func() int64 {
		done.Store(true)
		wg.Wait()
		return flips.Load()
	}
}

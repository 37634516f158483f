package confine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/taskhost/taskhost/internal/confine"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// upperFile reads name beneath the tmpfs's upper directory, through the
// mount's descriptor: the tmpfs is attached nowhere in this namespace.
func upperFile(t *testing.T, mnt *os.File, name string) (string, error) {
	t.Helper()
	fd, err := unix.Openat(int(mnt.Fd()), filepath.Join(confine.OverlayUpperDir, name), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b := make([]byte, 4096)
	n, err := f.Read(b)
	return string(b[:n]), err
}

func TestOverlayTakesTheWritesAndLeavesTheDirectory(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "old.txt"), []byte("before"), 0o600); err != nil {
		t.Fatal(err)
	}
	mnt, err := confine.NewOverlayUpper(1<<20, 64, 0, 0, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	defer mnt.Close()
	p := confine.Policy{Dir: dir, Overlay: mnt}
	got := run(t, p, nil, "read", filepath.Join(dir, "old.txt"), "write", filepath.Join(dir, "new.txt"),
		"write", filepath.Join(dir, "old.txt"), "cwd")
	assertLines(t, got, []string{"ok before", "ok ", "ok ", "ok " + dir})
	// The directory itself is as it was; the writes are in the tmpfs.
	if b, err := os.ReadFile(filepath.Join(dir, "old.txt")); err != nil || string(b) != "before" {
		t.Errorf("old.txt in the directory = %q, %v; want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("new.txt reached the directory: %v", err)
	}
	for _, name := range []string{"new.txt", "old.txt"} {
		if s, err := upperFile(t, mnt, name); err != nil || s != "written" {
			t.Errorf("upper %s = %q, %v; want %q", name, s, err, "written")
		}
	}
	// Nothing of the child's mounts is left in this namespace.
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), dir) {
		t.Errorf("a mount on %s leaked into the parent's namespace", dir)
	}
}

func TestOverlayTmpfsSizeBoundsTheWrites(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	mnt, err := confine.NewOverlayUpper(64<<10, 64, 0, 0, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	defer mnt.Close()
	out, err := start(t, confine.Policy{Dir: dir, Overlay: mnt}, nil, "/bin/sh", "-c", "head -c 1048576 /dev/zero > big; echo rc=$?")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "No space left on device") || !strings.Contains(string(out), "rc=1") {
		t.Errorf("a 1 MiB write into a 64 KiB tmpfs: %s", out)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(mnt.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if used := (st.Blocks - st.Bfree) * uint64(st.Bsize); used > 64<<10 {
		t.Errorf("the tmpfs holds %d bytes, past its 64 KiB", used)
	}
}

func TestJoinCgroupsPutsTheTargetInside(t *testing.T) {
	requireRoot(t)
	base := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		t.Skip("no cgroup v1 pids hierarchy")
	}
	dir, err := os.MkdirTemp(base, "confine-test-")
	if err != nil {
		t.Skipf("pids hierarchy not writable: %v", err)
	}
	defer os.Remove(dir)
	got := run(t, confine.Policy{Dir: t.TempDir(), JoinCgroups: []string{dir}}, nil, "cat", "/proc/self/cgroup")
	want := "pids:/" + filepath.Base(dir)
	if !strings.Contains(strings.Join(got, "\n"), want) {
		t.Errorf("the target's cgroups:\n%s\nwant a line with %q", strings.Join(got, "\n"), want)
	}
}

func TestOverlayAndJoinCgroupsPolicyChecks(t *testing.T) {
	dir := t.TempDir()
	many := make([]string, confine.MaxCgroups+1)
	for i := range many {
		many[i] = dir
	}
	for _, tc := range []struct {
		name  string
		p     confine.Policy
		field string
	}{
		{"relative cgroup", confine.Policy{Dir: dir, JoinCgroups: []string{"pids/x"}}, "JoinCgroups[0]"},
		{"not a cgroup", confine.Policy{Dir: dir, JoinCgroups: []string{dir}}, "JoinCgroups[0]"},
		{"too many cgroups", confine.Policy{Dir: dir, JoinCgroups: many}, "JoinCgroups"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := confine.Command(testBinary(t), tc.p, nil, "/bin/true")
			pe, ok := err.(*confine.PolicyError)
			if !ok || pe.Field != tc.field {
				t.Fatalf("err = %v, want a PolicyError on %s", err, tc.field)
			}
		})
	}
}

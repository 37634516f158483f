package tools

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/testfs"
	"github.com/taskhost/taskhost/internal/uids"
)

// boundsResult is what these tests read of a shell.run result.
type boundsResult struct {
	ExitCode         int    `json:"exit_code"`
	Signal           string `json:"signal"`
	Limit            string `json:"limit"`
	ChangesDiscarded bool   `json:"changes_discarded"`
	Output           string `json:"output"`
}

// newBoundsRegistry is a registry as a root daemon has it — a uid of its
// own per command — with shell.run needing no approval and its policy
// changed by tweak.
func newBoundsRegistry(t *testing.T, first int, tweak func(*config.Tool)) *Registry {
	t.Helper()
	sh := config.Default().Tools[ToolShellRun]
	sh.Approval, sh.TimeoutSeconds = config.ApprovalNever, 60
	if tweak != nil {
		tweak(&sh)
	}
	cfg := config.Default().Tools
	cfg[ToolShellRun] = sh
	o := Options{Tools: cfg, WorkspaceRoot: filepath.Join(t.TempDir(), "workspaces")}
	if os.Geteuid() == 0 {
		pool, err := uids.NewPool(uids.Range{First: first, Count: 8})
		if err != nil {
			t.Fatal(err)
		}
		o.UIDs = pool
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func needCgroupLimits(t *testing.T, r *Registry) {
	t.Helper()
	if r.resources == cgroups.ModeNone {
		t.Skipf("no cgroup controllers here: %s", r.Resources())
	}
}

func needDiskBound(t *testing.T, r *Registry) {
	t.Helper()
	if r.diskWhy != "" {
		t.Skipf("no filesystem bound here: %s", r.diskWhy)
	}
}

// shellAs runs command for task and decodes its result; a Go error fails
// the test.
func shellAs(t *testing.T, r *Registry, task, command string) boundsResult {
	t.Helper()
	a, err := json.Marshal(map[string]any{"command": command})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Call(t.Context(), Env{TaskID: task}, ToolShellRun, a)
	if err != nil {
		t.Fatalf("task %s: shell.run %q: %v", task, command, err)
	}
	var out boundsResult
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
		t.Fatalf("result %q: %v", res.Output, err)
	}
	if out.Limit != "" && !res.IsError {
		t.Errorf("a result with limit %q is not an error result", out.Limit)
	}
	return out
}

// neighbour starts a command of another task that is running when the
// caller's hostile command runs: it writes its pid to "up", waits for
// SIGUSR1 (sent by release), then forks, allocates and writes, and must
// end as if nothing happened elsewhere.
type neighbour struct {
	t    *testing.T
	pid  int
	done chan boundsResult
}

func startNeighbour(t *testing.T, r *Registry) *neighbour {
	t.Helper()
	const task = "neighbour"
	ws, err := r.Workspace(task)
	if err != nil {
		t.Fatal(err)
	}
	n := &neighbour{t: t, done: make(chan boundsResult, 1)}
	go func() {
		a, _ := json.Marshal(map[string]any{"command": `trap 'go=1' USR1; echo $$ > up; while [ -z "$go" ]; do sleep 0.01; done
seq 1 20 | while read i; do echo "$i" > "n$i"; done; head -c 4000000 /dev/zero | wc -c; cat n20`})
		res, err := r.Call(context.Background(), Env{TaskID: task}, ToolShellRun, a)
		var out boundsResult
		if err == nil {
			err = json.Unmarshal([]byte(res.Output), &out)
		}
		if err != nil {
			out = boundsResult{ExitCode: -1, Output: err.Error()}
		}
		n.done <- out
	}()
	n.pid = readPID(t, filepath.Join(ws, "up"))
	return n
}

// release lets the neighbour go on and checks it ended well.
func (n *neighbour) release() {
	n.t.Helper()
	if err := syscall.Kill(n.pid, syscall.SIGUSR1); err != nil {
		n.t.Fatalf("the neighbour's shell: %v", err)
	}
	got := <-n.done
	if got.ExitCode != 0 || got.Limit != "" || got.Output != "4000000\n20\n" {
		n.t.Errorf("the neighbour task's command: %+v, want exit 0, no limit, its output", got)
	}
}

// commandCgroups lists the command cgroups left in the registry's trees.
func commandCgroups(r *Registry) []string {
	var parents []string
	if r.cgroups != nil {
		parents = append(parents, r.cgroups.Parent())
	}
	if r.v1 != nil {
		for _, p := range r.v1.Parents() {
			parents = append(parents, p)
		}
	}
	var left []string
	for _, p := range parents {
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "cmd-") {
				left = append(left, filepath.Join(p, e.Name()))
			}
		}
	}
	return left
}

// A fork bomb reaches the command's pids limit and the whole command is
// ended at once, its result naming the limit — not left to burn until its
// timeout — while another task's command runs on and forks as it likes.
// Before, a bomb under a root daemon's uid had no bound but RLIMIT_NPROC,
// which does not bind uid 0, and ran until its timeout.
func TestShellRunForkBombEndsOnlyItsCommand(t *testing.T) {
	r := newBoundsRegistry(t, uids.DefaultFirst+210000, func(sh *config.Tool) { sh.MaxProcesses = 64 })
	needCgroupLimits(t, r)
	n := startNeighbour(t, r)
	got := shellAs(t, r, "bomb", `b() { b | b; }; b`)
	if got.Limit != limitProcesses {
		t.Errorf("fork bomb: %+v, want limit %q", got, limitProcesses)
	}
	n.release()
	if left := commandCgroups(r); len(left) > 0 {
		t.Errorf("command cgroups left after the calls: %v", left)
	}
}

// A memory hog reaches the command's memory limit: the kernel kills it,
// the host ends the rest of the command and names the limit; the
// neighbour allocates after it as before.
func TestShellRunMemoryHogEndsOnlyItsCommand(t *testing.T) {
	r := newBoundsRegistry(t, uids.DefaultFirst+210010, func(sh *config.Tool) { sh.CommandMemoryMB = 128 })
	needCgroupLimits(t, r)
	n := startNeighbour(t, r)
	got := shellAs(t, r, "hog", `head -c 536870912 /dev/zero | tail | wc -c; echo survived`)
	if got.Limit != limitMemory || strings.Contains(got.Output, "survived") {
		t.Errorf("memory hog: %+v, want limit %q and the command ended", got, limitMemory)
	}
	n.release()
	if left := commandCgroups(r); len(left) > 0 {
		t.Errorf("command cgroups left after the calls: %v", left)
	}
}

// A disk filler's writes stop at the workspace's limit — the filesystem
// under the overlay is full, not the data dir's — the command is ended
// with limit "disk", the workspace holds no more than MaxWorkspaceBytes,
// and another task's command and workspace.write go on. Before, a command
// filled the data dir's filesystem past the limit and other tasks failed
// store_error, creates were refused.
func TestShellRunDiskFillerEndsOnlyItsCommand(t *testing.T) {
	r := newBoundsRegistry(t, uids.DefaultFirst+210020, nil)
	needDiskBound(t, r)
	n := startNeighbour(t, r)
	a, _ := json.Marshal(map[string]any{"path": "seed.txt", "content": strings.Repeat("s", 1<<20)})
	if _, err := r.Call(t.Context(), Env{TaskID: "filler"}, ToolWorkspaceWrite, a); err != nil {
		t.Fatal(err)
	}
	got := shellAs(t, r, "filler", `while :; do head -c 1048576 /dev/zero >> fill; done`)
	if got.Limit != limitDisk {
		t.Errorf("disk filler: %+v, want limit %q", got, limitDisk)
	}
	ws, _ := r.Workspace("filler")
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	used, err := usage(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	if used > MaxWorkspaceBytes || used < MaxWorkspaceBytes-(1<<20) {
		t.Errorf("the filler's workspace holds %d bytes; want it filled to its limit %d and no further", used, MaxWorkspaceBytes)
	}
	if b, err := root.ReadFile("seed.txt"); err != nil || len(b) != 1<<20 {
		t.Errorf("the file written before the command: %d bytes, %v", len(b), err)
	}
	// A neighbour's tools still write.
	a, _ = json.Marshal(map[string]any{"path": "after.txt", "content": strings.Repeat("n", 1<<20)})
	if _, err := r.Call(t.Context(), Env{TaskID: "neighbour"}, ToolWorkspaceWrite, a); err != nil {
		t.Errorf("the neighbour's workspace.write after the filler: %v", err)
	}
	n.release()
	// The full workspace keeps nothing of the next command's writes.
	if got := shellAs(t, r, "filler", `echo more > more.txt`); got.Limit != limitDisk {
		t.Errorf("a write to the full workspace: %+v, want limit %q", got, limitDisk)
	}
	if _, err := root.Lstat("more.txt"); !os.IsNotExist(err) {
		t.Errorf("more.txt in the full workspace: %v", err)
	}
}

// What takes little room in the tmpfs but more as files — a sparse file, a
// hard link — would take the workspace past its limit when merged:
// nothing of that command is kept, and its result says so.
func TestShellRunChangesPastTheLimitAreDiscarded(t *testing.T) {
	r := newBoundsRegistry(t, uids.DefaultFirst+210030, nil)
	needDiskBound(t, r)
	for _, tc := range []struct{ name, command string }{
		{"sparse", `echo kept > small; truncate -s 200M sparse`},
		{"hard links", `echo kept > small; head -c 40000000 /dev/zero > a; ln a b`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := strings.ReplaceAll(tc.name, " ", "_")
			got := shellAs(t, r, task, tc.command)
			if got.Limit != limitDisk || !got.ChangesDiscarded {
				t.Errorf("%+v, want limit %q and the changes discarded", got, limitDisk)
			}
			ws, _ := r.Workspace(task)
			ents, err := os.ReadDir(ws)
			if err != nil || len(ents) != 0 {
				t.Errorf("workspace after a discarded command: %v, %v; want it empty", ents, err)
			}
		})
	}
	if got := shellAs(t, r, "at_limit", `head -c 40000000 /dev/zero > a; head -c 20000000 /dev/zero > b`); got.ExitCode != 0 || got.Limit != "" {
		t.Errorf("60 MB of files under the 64 MiB limit: %+v, want them kept", got)
	}
}

// Every kind of change a command makes reaches the workspace when it
// ends: new, changed, removed and renamed files, a directory removed and
// made again (opaque), a directory replaced by a file and a file by a
// directory, symlinks (kept as links, never followed, even where the
// workspace had a link to outside), FIFOs, modes made safe, the
// idempotency keys of a file the command only renamed; and everything is
// the daemon's again.
func TestShellRunMergesEveryKindOfChange(t *testing.T) {
	r := newBoundsRegistry(t, uids.DefaultFirst+210040, nil)
	needDiskBound(t, r)
	outside := t.TempDir()
	ws, _ := r.Workspace("merge")
	write := func(path, content string, key string) {
		a, _ := json.Marshal(map[string]any{"path": path, "content": content})
		if _, err := r.Call(t.Context(), Env{TaskID: "merge", IdempotencyKey: key}, ToolWorkspaceWrite, a); err != nil {
			t.Fatal(err)
		}
	}
	write("keep.txt", "keep\n", "")
	write("change.txt", "old\n", "")
	write("gone.txt", "gone\n", "")
	write("keyed.txt", "keyed\n", "k1")
	write("redo/old.txt", "old\n", "")
	write("dir2file/x", "x\n", "")
	write("file2dir", "f\n", "")
	write("rm/deep/er.txt", "e\n", "")
	if err := os.Symlink(outside, filepath.Join(ws, "outlink")); err != nil {
		t.Fatal(err)
	}
	got := shellAs(t, r, "merge", `set -e
echo new > change.txt; echo made > new.txt; rm gone.txt; mv keyed.txt renamed.txt
rm -r redo; mkdir redo; echo fresh > redo/new.txt
rm -r dir2file; echo now-a-file > dir2file
rm file2dir; mkdir file2dir; echo in > file2dir/in.txt
rm -r rm
rm outlink; mkdir outlink; echo not-outside > outlink/f
ln -s /etc/passwd passwd-link; ln -s keep.txt rel-link
mkfifo fifo; echo s > setid; chmod 6777 setid`)
	if got.ExitCode != 0 {
		t.Fatalf("the command: %+v", got)
	}
	files := map[string]string{
		"keep.txt": "keep\n", "change.txt": "new\n", "new.txt": "made\n", "renamed.txt": "keyed\n",
		"redo/new.txt": "fresh\n", "dir2file": "now-a-file\n", "file2dir/in.txt": "in\n", "outlink/f": "not-outside\n",
	}
	for name, want := range files {
		if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	for _, name := range []string{"gone.txt", "keyed.txt", "redo/old.txt", "rm", "dir2file/x"} {
		if _, err := os.Lstat(filepath.Join(ws, name)); err == nil {
			t.Errorf("%s: %v, want it removed", name, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the merge wrote through the workspace's old link: %v", ents)
	}
	for link, want := range map[string]string{"passwd-link": "/etc/passwd", "rel-link": "keep.txt"} {
		if got, err := os.Readlink(filepath.Join(ws, link)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want -> %q", link, got, err, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(ws, "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo: %v, %v", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "setid")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("setid: %v, %v; want no set-id bit, no group or other write", fi, err)
	}
	// The key of the renamed file went with it: the keyed write is known.
	a, _ := json.Marshal(map[string]any{"path": "renamed.txt", "content": "keyed\n"})
	res, err := r.Call(t.Context(), Env{TaskID: "merge", IdempotencyKey: "k1"}, ToolWorkspaceWrite, a)
	if err != nil || !strings.Contains(res.Output, `"deduplicated":true`) {
		t.Errorf("the keyed write again on the renamed file: %v, %v; want it deduplicated", res.Output, err)
	}
	if os.Geteuid() == 0 {
		out, err := exec.Command("find", ws, "!", "-uid", strconv.Itoa(os.Geteuid())).CombinedOutput()
		if err != nil || len(out) != 0 {
			t.Errorf("entries not the daemon's after the command: %s %v", out, err)
		}
	}
}

// A command's cgroups are removed when it ends, and those a killed daemon
// left behind — with a process still in them — are swept when the next
// registry starts.
func TestShellRunStaleCgroupsAreSwept(t *testing.T) {
	r := newBoundsRegistry(t, uids.DefaultFirst+210050, nil)
	needCgroupLimits(t, r)
	if r.v1 == nil {
		t.Skip("the cgroup2 tree's sweep is TestShellRunCgroupLifecycle's")
	}
	if got := shellAs(t, r, "one", "echo ok"); got.ExitCode != 0 {
		t.Fatalf("%+v", got)
	}
	if left := commandCgroups(r); len(left) > 0 {
		t.Errorf("command cgroups left after the call: %v", left)
	}
	// A dead daemon's tree: a pid that is no process (beyond pid_max).
	var stale []string
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	for c, parent := range r.v1.Parents() {
		dir := filepath.Join(filepath.Dir(parent), "taskhost-2147483646", "cmd-stale")
		stale = append(stale, dir)
		if c == "pids" {
			testfs.StaleCgroup(t, dir, sleeper.Process.Pid)
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	newBoundsRegistry(t, uids.DefaultFirst+210060, nil)
	if err := <-done; err == nil || sleeper.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the process in a stale cgroup: %v, want it killed", err)
	}
	for _, dir := range stale {
		if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
			t.Errorf("stale %s: %v, want it removed", filepath.Dir(dir), err)
		}
	}
}

// BenchmarkShellRunBounds is what the bounds cost a command: `true` with
// the cgroup limits and the workspace overlay, and without (the same
// registry, both switched off), in the same run.
func BenchmarkShellRunBounds(b *testing.B) {
	for _, bounded := range []bool{false, true} {
		name := "unbounded"
		if bounded {
			name = "bounded"
		}
		b.Run(name, func(b *testing.B) {
			sh := config.Default().Tools[ToolShellRun]
			sh.Approval = config.ApprovalNever
			cfg := config.Default().Tools
			cfg[ToolShellRun] = sh
			r, err := New(Options{Tools: cfg, WorkspaceRoot: filepath.Join(b.TempDir(), "workspaces")})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if !bounded {
				r.v1, r.diskWhy, r.resources = nil, "benchmark", cgroups.ModeNone
			}
			a, _ := json.Marshal(map[string]any{"command": "true"})
			b.ResetTimer()
			for b.Loop() {
				if _, err := r.Call(b.Context(), Env{TaskID: "bench"}, ToolShellRun, a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A command's CPU is a bandwidth: a burner under command_cpu_percent = 10
// gets a quota of 10 ms per 100 ms period, and the kernel throttles it
// (cpu.stat's nr_throttled grows) while it runs; the cancel then ends it.
func TestShellRunCPUIsThrottled(t *testing.T) {
	r := newBoundsRegistry(t, uids.DefaultFirst+210070, func(sh *config.Tool) { sh.CommandCPUPercent = 10 })
	needCgroupLimits(t, r)
	if r.v1 == nil {
		t.Skip("reads the cgroup v1 cpu hierarchy")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		a, _ := json.Marshal(map[string]any{"command": "echo $$ > up; while :; do :; done"})
		_, err := r.Call(ctx, Env{TaskID: "burner"}, ToolShellRun, a)
		done <- err
	}()
	ws, _ := r.Workspace("burner")
	readPID(t, filepath.Join(ws, "up"))
	var dir string
	waitFor(t, "the command's cpu cgroup", func() bool {
		ents, _ := os.ReadDir(r.v1.Parents()["cpu"])
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "cmd-") {
				dir = filepath.Join(r.v1.Parents()["cpu"], e.Name())
				return true
			}
		}
		return false
	})
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us")); err != nil || strings.TrimSpace(string(b)) != "10000" {
		t.Errorf("cpu.cfs_quota_us = %q, %v; want 10000 (10%% of a 100 ms period)", b, err)
	}
	waitFor(t, "the burner to be throttled", func() bool {
		return cgroups.Counter(filepath.Join(dir, "cpu.stat"), "nr_throttled") > 0
	})
	cancel()
	if err := <-done; err == nil {
		t.Error("the cancelled burner's call returned no error")
	}
}

// A file the command gave more xattr names than the merge reads (64 KiB)
// is kept without them; the merge does not fail on it.
func TestShellRunMergeKeepsAFileWithTooManyXattrs(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 to set xattrs")
	}
	r := newBoundsRegistry(t, uids.DefaultFirst+210080, nil)
	needDiskBound(t, r)
	got := shellAs(t, r, "xattrs", `echo hi > f && python3 -c '
import os
n = 0
try:
    for i in range(2000):
        os.setxattr("f", "user.%05d" % i + "x" * 200, b"v")
        n += 1
except OSError as e:
    pass
print(n)'`)
	if got.ExitCode != 0 {
		t.Fatalf("%+v", got)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(got.Output))
	if n*207 <= 64<<10 {
		t.Skipf("the tmpfs took %d xattrs only, under the merge's 64 KiB", n)
	}
	ws, _ := r.Workspace("xattrs")
	if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "hi\n" {
		t.Errorf("f = %q, %v", b, err)
	}
}

// A command makes at most MaxCommandEntries entries: past it a create
// fails ENOSPC (the tmpfs's inodes), the command ends with limit "disk",
// and what it made up to then is kept.
func TestShellRunEntriesPastTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("makes and merges 65,536 files")
	}
	r := newBoundsRegistry(t, uids.DefaultFirst+210090, nil)
	needDiskBound(t, r)
	got := shellAs(t, r, "entries", `mkdir d && seq 1 70000 | sed 's|^|d/|' | xargs touch`)
	if got.Limit != limitDisk {
		t.Errorf("70,000 files: %+v, want limit %q", got, limitDisk)
	}
	ws, _ := r.Workspace("entries")
	ents, err := os.ReadDir(filepath.Join(ws, "d"))
	if err != nil {
		t.Fatal(err)
	}
	// The tmpfs's root, its upper and work directories and d take four.
	if n := len(ents); n > MaxCommandEntries-4 || n < MaxCommandEntries-64 {
		t.Errorf("%d files kept, want about %d (the limit %d less the tmpfs's own)", n, MaxCommandEntries-4, MaxCommandEntries)
	}
}

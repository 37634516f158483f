package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testfs"
	"github.com/taskhost/taskhost/internal/testwait"
)

// The daemon's data dir fills up while a step runs. `task watch` ends with
// the task interrupted (store_error), exit 6; a create is refused with exit
// 5 naming the cause; once space is back the interruption is recorded, and
// a resume runs the task to completion under the same id.
func TestDaemonFullDiskInterruptsThenResumes(t *testing.T) {
	t.Parallel()
	data := testfs.MountTmpfs(t, testwait.ShortTempDir(t), 64<<20)
	ctl := testwait.ShortTempDir(t) // off the full disk
	d := startDaemon(t, data, testexecConfig(t, ctl))
	release, pidFile := filepath.Join(ctl, "release"), filepath.Join(ctl, "pid")
	id := createTask(t, d, ctl, map[string]any{"goal": "fill the disk", "testexec": map[string]any{"steps": 2, "wait_file": release, "pid_file": pidFile}})
	pid := readPid(t, pidFile)
	watch := startTaskhost(t, "task", "watch", id, "--data-dir", data)

	filler := testfs.FillDisk(t, data)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	transcript := drain(t, watch)
	if code := watch.cmd.ProcessState.ExitCode(); code != 6 || !strings.Contains(transcript, "store_error") {
		t.Fatalf("task watch exit %d, want 6 (interrupted) with store_error:\n%s%s", code, transcript, watch.stderr)
	}
	t.Logf("$ taskhost task watch %s   # the disk fills during step 1\n%s", id, transcript)
	testwait.Until(t, 10*time.Second, "the plugin to be stopped", func() bool { return !alive(pid) })
	if log := d.logText(); !strings.Contains(log, `"@level":"error","@message":"store write failed`) {
		t.Errorf("the daemon did not log the failure at ERROR:\n%s", log)
	}

	_, errOut, code := d.cli(t, "task", "create", "--executor", "testexec", "--goal", "one more")
	if code != 5 || !strings.Contains(errOut, "store unavailable: disk full") {
		t.Fatalf("create on a full disk: exit %d, %q; want 5 and the cause", code, errOut)
	}
	t.Logf("$ taskhost task create ...   # still full\n%s(exit %d)", errOut, code)
	var st statusJSON
	d.cliJSON(t, &st, "task", "status", id)
	if st.Task.Status != "interrupted" || st.Task.Reason != "store_error" || !strings.Contains(st.Task.Message, "store_degraded") {
		t.Fatalf("status on a full disk = %+v, want interrupted (store_error) store_degraded", st.Task)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 15*time.Second, "the interruption to be recorded", func() bool {
		var st statusJSON
		d.cliJSON(t, &st, "task", "status", id)
		return st.Task.Reason == "store_error" && !strings.Contains(st.Task.Message, "store_degraded")
	})
	if out, errOut, code := d.cli(t, "task", "resume", id); code != 0 {
		t.Fatalf("resume after space came back: exit %d\n%s%s", code, out, errOut)
	}
	watch = startTaskhost(t, "task", "watch", id, "--data-dir", data)
	transcript = drain(t, watch)
	if code := watch.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(transcript, "completed") {
		t.Fatalf("task watch after the resume: exit %d\n%s%s", code, transcript, watch.stderr)
	}
	t.Logf("$ taskhost task resume %s && taskhost task watch %s   # space is back\n%s", id, id, transcript)
}

// drain collects a started command's stdout until it exits.
func drain(t *testing.T, s *started) string {
	t.Helper()
	var b strings.Builder
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.cmd.Wait()
				return b.String()
			}
			b.WriteString(l + "\n")
		case <-timeout:
			t.Fatalf("timed out waiting for taskhost to end; so far:\n%s", b.String())
		}
	}
}

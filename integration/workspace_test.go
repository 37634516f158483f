package integration

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testfs"
	"github.com/taskhost/taskhost/internal/testwait"
)

// A task's workspace lives in the store: a host SIGKILLed mid-step leaves
// the workspace as of the last committed step there, and whichever host
// resumes the task — another daemon on the same PostgreSQL database, the
// same SQLite store after a restart (with its disk's copy or without it),
// or a store restored from 'taskhost backup' into another data dir — starts
// from it and completes the task.

// wsShell lets the test executor's shell.run calls run unasked.
const wsShell = "[tools.\"shell.run\"]\napproval = \"never\"\n"

// wsSpec is a five-step task whose steps write files (testexec
// step_files: w-N.txt by workspace.write, s-A.txt by shell.run, per step N
// and attempt A) and whose attempt 4 sleeps, after writing, until killed.
func wsSpec(pidFile string) map[string]any {
	return map[string]any{"goal": "files across hosts", "testexec": map[string]any{
		"steps": 5, "step_files": true, "pid_file": pidFile, "sleep_at_attempt": 4, "long_sleep_ms": 120000,
	}}
}

// wsAfterResume is the workspace of a wsSpec task killed in attempt 4 and
// resumed once: steps 1–3 as attempts 1–3 wrote them, step 4 and 5 as
// attempts 5 and 6 did — and nothing of attempt 4 (no s-4.txt).
var wsAfterResume = map[string]string{
	"w-1.txt": "step 1 attempt 1", "w-2.txt": "step 2 attempt 2", "w-3.txt": "step 3 attempt 3",
	"w-4.txt": "step 4 attempt 5", "w-5.txt": "step 5 attempt 6",
	"s-1.txt": "step 1\n", "s-2.txt": "step 2\n", "s-3.txt": "step 3\n", "s-5.txt": "step 4\n", "s-6.txt": "step 5\n",
}

// workspaceFiles is the regular files of a data dir's workspace of task id.
func workspaceFiles(t *testing.T, dataDir, id string) map[string]string {
	t.Helper()
	return testfs.Tree(t, filepath.Join(dataDir, "workspaces", id))
}

// killMidStep4 waits until attempt 4 of task id has written its files on
// d, then SIGKILLs d and waits for its plugin to die with it.
func killMidStep4(t *testing.T, d *daemon, id, pidFile string) {
	t.Helper()
	testwait.Until(t, 60*time.Second, "attempt 4 to write its files", func() bool {
		st := status(t, d, id)
		_, err := os.Stat(filepath.Join(d.dataDir, "workspaces", id, "s-4.txt"))
		return len(st.Attempts) == 4 && st.Attempts[3].Status == "running" && err == nil
	})
	plugin := readPid(t, pidFile)
	d.kill(t)
	testwait.Until(t, 5*time.Second, "the plugin to die with its host", func() bool { return !alive(plugin) })
}

// resumeToEnd resumes task id on d and checks it completes with the
// workspace wsAfterResume.
func resumeToEnd(t *testing.T, d *daemon, id string) {
	t.Helper()
	testwait.Until(t, 20*time.Second, "the task interrupted", func() bool {
		return status(t, d, id).Task.Status == "interrupted"
	})
	var v oneTask
	d.cliJSON(t, &v, "task", "resume", id)
	testwait.Until(t, 60*time.Second, "the resumed task to complete", func() bool {
		return status(t, d, id).Task.Status == "completed"
	})
	done := status(t, d, id)
	if string(done.Task.Result) != `{"steps":5}` {
		t.Fatalf("result %s, want {\"steps\":5}", done.Task.Result)
	}
	if got := workspaceFiles(t, d.dataDir, id); !maps.Equal(got, wsAfterResume) {
		t.Fatalf("workspace after the resume:\n%v\nwant (steps 1–3 as committed, nothing of the killed attempt 4):\n%v", got, wsAfterResume)
	}
}

// TestFleetWorkspaceAfterHostKill: PostgreSQL, two daemons. A runs steps
// 1–3 and is SIGKILLed mid-step 4; B, with a data dir of its own, resumes
// the task, which completes with the files of steps 1–3 as A committed
// them.
func TestFleetWorkspaceAfterHostKill(t *testing.T) {
	t.Parallel()
	work, hs := startFleet(t, wsShell, "host-a", "host-b")
	a, b := hs[0], hs[1]
	pidFile := filepath.Join(work, "pid")
	id := createTask(t, a, work, wsSpec(pidFile), "--max-steps", "8")
	killMidStep4(t, a, id, pidFile)
	if got := workspaceFiles(t, b.dataDir, id); len(got) != 0 {
		t.Fatalf("B holds files of the task before resuming it: %v", got)
	}
	// B has no copy, yet task files through it gives steps 1–3 as A
	// committed them, from the store.
	committed := map[string]string{}
	for _, name := range []string{"w-1.txt", "w-2.txt", "w-3.txt", "s-1.txt", "s-2.txt", "s-3.txt"} {
		committed[name] = wsAfterResume[name]
	}
	var list filesJSON
	b.cliJSON(t, &list, "task", "files", id)
	listed := map[string]int64{}
	for _, f := range list.Files {
		listed[f.Path] = f.Size
	}
	for name, content := range committed {
		if out, errOut, code := b.cli(t, "task", "files", id, name); code != 0 || out != content {
			t.Errorf("task files %s through B: exit %d, %q (%s); want %q", name, code, out, errOut, content)
		}
		if listed[name] != int64(len(content)) {
			t.Errorf("B lists %s with %d bytes, want %d", name, listed[name], len(content))
		}
	}
	if len(listed) != len(committed) {
		t.Errorf("B lists %v, want exactly steps 1–3's files %v", listed, committed)
	}
	resumeToEnd(t, b, id)
}

// TestWorkspaceAfterHostKillSQLite: SQLite, one store file. A daemon runs
// steps 1–3 and is SIGKILLed mid-step 4; then the task is resumed by a
// daemon on the same data dir (its workspace as the kill left it, or
// gone: a lost disk) or on a data dir restored from a backup of the
// store.
func TestWorkspaceAfterHostKillSQLite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// next prepares the data dir the resuming daemon uses.
		next func(t *testing.T, data, id string) string
	}{
		{"same data dir", func(t *testing.T, data, id string) string {
			if got := workspaceFiles(t, data, id); got["s-4.txt"] == "" {
				t.Fatalf("the killed attempt's file is not on disk (%v): the test would not see it rolled back", got)
			}
			return data
		}},
		{"workspaces lost", func(t *testing.T, data, id string) string {
			if err := os.RemoveAll(filepath.Join(data, "workspaces")); err != nil {
				t.Fatal(err)
			}
			return data
		}},
		{"restored from a backup", func(t *testing.T, data, id string) string {
			backup := filepath.Join(testwait.ShortTempDir(t), "backup")
			if out, errOut, code := taskhost(t, "backup", "--data-dir", data, backup); code != 0 {
				t.Fatalf("backup: exit %d %q %q", code, out, errOut)
			}
			restored := filepath.Join(testwait.ShortTempDir(t), "restored")
			if out, errOut, code := taskhost(t, "restore", backup, "--data-dir", restored); code != 0 {
				t.Fatalf("restore: exit %d %q %q", code, out, errOut)
			}
			return restored
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
			pidFile := filepath.Join(work, "pid")
			cfg := writeConfig(t, work, fmt.Sprintf("[executors.testexec]\npath = %q\nread_write = [%q]\n\n%s",
				filepath.Join(binDir, "taskhost-executor-testexec"), work, wsShell))
			a := startDaemon(t, data, cfg)
			id := createTask(t, a, work, wsSpec(pidFile), "--max-steps", "8")
			killMidStep4(t, a, id, pidFile)
			b := startDaemon(t, tc.next(t, data, id), cfg)
			resumeToEnd(t, b, id)
		})
	}
}

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testwait"
)

type filesJSON struct {
	Files []struct {
		Path     string `json:"path"`
		Type     string `json:"type"`
		Size     int64  `json:"size"`
		Modified string `json:"modified"`
	} `json:"files"`
	Truncated bool `json:"truncated"`
}

// Results out of a real daemon, then the task deleted: task files lists
// and streams the workspace (a symlink planted there is refused), task
// delete refuses a running task and removes a finished one's rows and
// workspace; a backup taken while it runs restores into a new data dir
// that a second daemon serves.
func TestDaemonResultsDeleteBackup(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	d := startDaemon(t, data, "")
	notes := filepath.Join(work, "notes.md")
	if err := os.WriteFile(notes, []byte("# my notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := createTask(t, d, work, map[string]any{"goal": "g", "testexec": map[string]any{"steps": 1}}, "--file", notes+"=notes.md")
	running := createTask(t, d, work, map[string]any{"goal": "g", "testexec": map[string]any{"steps": 2, "sleep_ms": 120000}})
	if final, code := startWatch(t, d, done).result(t); code != 0 || final.Status != "completed" {
		t.Fatalf("task %s: exit %d, %+v", done, code, final)
	}
	ws := filepath.Join(data, "workspaces", done)
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "passwd")); err != nil {
		t.Fatal(err)
	}

	var list filesJSON
	d.cliJSON(t, &list, "task", "files", done)
	if len(list.Files) != 2 || list.Files[0].Path != "notes.md" || list.Files[0].Size != 11 || list.Files[1].Type != "symlink" || list.Truncated {
		t.Fatalf("task files: %+v", list)
	}
	if out, errOut, code := d.cli(t, "task", "files", done, "notes.md"); code != 0 || out != "# my notes\n" {
		t.Fatalf("task files notes.md: exit %d, %q %q", code, out, errOut)
	}
	dest := filepath.Join(work, "out.md")
	if _, errOut, code := d.cli(t, "task", "files", done, "notes.md", "-o", dest); code != 0 {
		t.Fatalf("-o: exit %d %s", code, errOut)
	}
	if got, err := os.ReadFile(dest); err != nil || string(got) != "# my notes\n" {
		t.Fatalf("-o wrote %q, %v", got, err)
	}
	cpDir := filepath.Join(work, "cp")
	if err := os.Mkdir(cpDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := d.cli(t, "task", "cp", done+":notes.md", cpDir); code != 0 {
		t.Fatalf("task cp: exit %d %s", code, errOut)
	}
	if got, err := os.ReadFile(filepath.Join(cpDir, "notes.md")); err != nil || string(got) != "# my notes\n" {
		t.Fatalf("task cp wrote %q, %v", got, err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"task", "files", done, "passwd"}, 2, "is a symlink"},
		{[]string{"task", "files", done, "../../host.key"}, 2, `".." segment`},
		{[]string{"task", "files", done, "nope"}, 3, "not found"},
		{[]string{"task", "files", done, "notes.md", "-o", dest}, 2, "already exists"},
		{[]string{"task", "delete", running}, 4, "is running"},
	} {
		if _, errOut, code := d.cli(t, tc.args...); code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("taskhost %v: exit %d %q; want exit %d saying %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}

	// A backup while the daemon runs, restored into a new dir.
	backup := filepath.Join(work, "backup")
	if out, errOut, code := taskhost(t, "backup", "--data-dir", data, backup); code != 0 || !strings.Contains(out, "host.key") {
		t.Fatalf("backup: exit %d %q %q", code, out, errOut)
	}
	restored := filepath.Join(testwait.ShortTempDir(t), "r")
	if out, errOut, code := taskhost(t, "restore", backup, "--data-dir", restored); code != 0 || !strings.Contains(out, "checkpoints verified") {
		t.Fatalf("restore: exit %d %q %q", code, out, errOut)
	}

	if out, errOut, code := d.cli(t, "task", "delete", done); code != 0 || !strings.Contains(out, "deleted task "+done) {
		t.Fatalf("delete: exit %d %q %q", code, out, errOut)
	}
	if _, _, code := d.cli(t, "task", "status", done); code != 3 {
		t.Fatalf("status of a deleted task: exit %d, want 3", code)
	}
	if _, err := os.Lstat(ws); !os.IsNotExist(err) {
		t.Fatalf("the deleted task's workspace: %v, want it gone", err)
	}

	// The restored data dir has both tasks; the one running at the backup
	// is interrupted there.
	d2 := startDaemon(t, restored, "")
	var st statusJSON
	d2.cliJSON(t, &st, "task", "status", done)
	if st.Task.Status != "completed" {
		t.Fatalf("restored %s: %+v", done, st.Task)
	}
	// Start-up recovery ran before the daemon served.
	d2.cliJSON(t, &st, "task", "status", running)
	if st.Task.Status != "interrupted" || st.Task.Reason != "host_restart" {
		t.Fatalf("restored running task: %+v, want interrupted (host_restart)", st.Task)
	}
	var all struct {
		Resumed []taskJSON `json:"resumed"`
		Failed  []struct {
			TaskID string `json:"task_id"`
			Error  string `json:"error"`
		} `json:"failed"`
	}
	d2.cliJSON(t, &all, "task", "resume", "--all-interrupted")
	if len(all.Resumed) != 1 || all.Resumed[0].ID != running || all.Resumed[0].RunID != 2 || len(all.Failed) != 0 {
		t.Fatalf("task resume --all-interrupted: %+v", all)
	}
	if _, errOut, code := d2.cli(t, "task", "resume", "--all-interrupted", "--all"); code != 7 || !strings.Contains(errOut, "admin") {
		t.Fatalf("--all by a non-admin: exit %d %q, want 7", code, errOut)
	}
	var cancelled oneTask
	d2.cliJSON(t, &cancelled, "task", "cancel", running)
}

package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// interruptDaemon is a `taskhost serve` with MACHINE-SPIRIT enabled and a
// second principal, ci, on a token listener.
type interruptDaemon struct {
	d          *daemon
	data, cfg  string
	spec       string
	asCI       func(t *testing.T, args ...string) (string, string, int)
	askedGoal  string
	answerFile func(id string) string
}

func startInterruptDaemon(t *testing.T) *interruptDaemon {
	t.Helper()
	work := testwait.ShortTempDir(t)
	sum := sha256.Sum256([]byte(ciToken))
	cfg := writeConfig(t, work, fmt.Sprintf("[machine_spirit]\nenabled = true\n\n[api]\ntcp_listen = \"127.0.0.1:0\"\n\n[api.tokens]\nci = %q\n",
		hex.EncodeToString(sum[:])))
	data := filepath.Join(work, "data")
	const goal = "What is x? Answer with a JSON object."
	id := &interruptDaemon{data: data, cfg: cfg, askedGoal: goal,
		spec: writeSpec(t, work, map[string]any{"goal": goal, "machinespirit": map[string]any{"graph": "ask_human"}}),
		answerFile: func(id string) string {
			b, _ := os.ReadFile(filepath.Join(data, "workspaces", id, "answer.json"))
			return string(b)
		},
	}
	id.start(t)
	return id
}

func (id *interruptDaemon) start(t *testing.T) {
	t.Helper()
	id.d = startDaemon(t, id.data, id.cfg)
	d := id.d
	id.asCI = func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "taskhost"), append(args, "--address", d.tcp)...)
		cmd.Env = []string{"HOME=/tmp", "TASKHOST_TOKEN=" + ciToken}
		return runCmd(t, cmd)
	}
}

func (id *interruptDaemon) create(t *testing.T) string {
	t.Helper()
	var v oneTask
	id.d.cliJSON(t, &v, "task", "create", "--executor", "machinespirit", "--spec-file", id.spec)
	return v.Task.ID
}

// question waits until task is waiting_approval on its question and returns
// the pending approval.
func (id *interruptDaemon) question(t *testing.T, task string) approvalJSON {
	t.Helper()
	var a approvalJSON
	testwait.Until(t, 60*time.Second, "the question of task "+task, func() bool {
		var list approvalsJSON
		id.d.cliJSON(t, &list, "approvals", "list")
		for _, x := range list.Approvals {
			if x.TaskID == task {
				a = x
				return true
			}
		}
		return false
	})
	if a.Kind != "input" || a.Tool != "" || a.Prompt != id.askedGoal {
		t.Fatalf("the pending approval %+v is not the graph's question %q", a, id.askedGoal)
	}
	if st := id.status(t, task); st.Status != "waiting_approval" {
		t.Fatalf("task %s is %s while its question is pending", task, st.Status)
	}
	return a
}

func (id *interruptDaemon) status(t *testing.T, task string) taskJSON {
	t.Helper()
	var st statusJSON
	id.d.cliJSON(t, &st, "task", "status", task)
	return st.Task
}

// finish watches task to its end.
func (id *interruptDaemon) finish(t *testing.T, task string) taskJSON {
	t.Helper()
	w := startWatch(t, id.d, task)
	final, _ := w.result(t)
	return final
}

// approvalsOf lists every approval of task, oldest first.
func (id *interruptDaemon) approvalsOf(t *testing.T, task string) []approvalJSON {
	t.Helper()
	var list approvalsJSON
	id.d.cliJSON(t, &list, "approvals", "list", "--status", "all")
	var out []approvalJSON
	for _, a := range list.Approvals {
		if a.TaskID == task {
			out = append(out, a)
		}
	}
	return out
}

// A MACHINE-SPIRIT graph interrupt with the real daemon, plugin and swipl:
// the shipped ask_human graph pauses on its question (waiting_approval, an
// approval of kind input), and the answer given with `approve --value`
// reaches the node after the pause, which writes it to the workspace.
// Values past the 64 KiB bound and values that are not JSON are refused
// with the field, the limit and the size, and leave the question pending;
// another principal neither sees nor answers it; a rejection fails the
// task; a daemon SIGKILLed during the wait leaves the task interrupted, and
// its resume asks the same question again, once.
func TestMachineSpiritInterrupt(t *testing.T) {
	t.Parallel()
	id := startInterruptDaemon(t)

	t.Run("answered", func(t *testing.T) {
		task := id.create(t)
		a := id.question(t, task)

		// Another principal: no such approval, with or without a value.
		out, _, code := id.asCI(t, "approvals", "list", "--json")
		if code != 0 || strings.Contains(out, a.ID) {
			t.Fatalf("ci lists root's question: exit %d\n%s", code, out)
		}
		for _, args := range [][]string{{"approve", a.ID, "--value", `{"x":2}`}, {"approve", a.ID}, {"reject", a.ID}} {
			if _, errOut, code := id.asCI(t, args...); code != 3 || !strings.Contains(errOut, "not found") {
				t.Fatalf("ci: taskhost %v: exit %d, %s; want not found (3)", args, code, errOut)
			}
		}

		atBound := `{"x":1}` + strings.Repeat(" ", 64<<10-len(`{"x":1}`))
		for _, tc := range []struct{ name, value, want string }{
			{"past the bound", atBound + " ", "value_json: the value is 65537 bytes, limit 65536"},
			{"not JSON", `{"x":`, "value_json: the value (5 bytes) is not one JSON value"},
			{"two values", `1 2`, "value_json:"},
		} {
			_, errOut, code := id.d.cli(t, "approve", a.ID, "--value", tc.value)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("%s: exit %d, stderr %q; want exit 2 with %q", tc.name, code, errOut, tc.want)
			}
		}
		if _, errOut, code := id.d.cli(t, "reject", a.ID, "--value", "1"); code != 2 {
			t.Fatalf("reject --value: exit %d, %s; want a usage error", code, errOut)
		}
		if st := id.status(t, task); st.Status != "waiting_approval" {
			t.Fatalf("a refused answer moved the task to %s", st.Status)
		}

		var resolved struct {
			Approval approvalJSON `json:"approval"`
		}
		id.d.cliJSON(t, &resolved, "approve", a.ID, "--value", atBound)
		if resolved.Approval.Status != "approved" || resolved.Approval.Kind != "input" {
			t.Fatalf("approve: %+v", resolved.Approval)
		}
		final := id.finish(t, task)
		if final.Status != "completed" || string(final.Result) != `{"answer":{"x":1}}` {
			t.Fatalf("the task ended %s (%s) with %s", final.Status, final.Reason, final.Result)
		}
		if got := id.answerFile(task); got != `{"x":1}` {
			t.Fatalf("the node after the pause wrote %q", got)
		}
		if n := len(id.approvalsOf(t, task)); n != 1 {
			t.Fatalf("%d questions asked; want 1", n)
		}
	})

	t.Run("rejected", func(t *testing.T) {
		task := id.create(t)
		a := id.question(t, task)
		id.d.cliJSON(t, &struct {
			Approval approvalJSON `json:"approval"`
		}{}, "reject", a.ID)
		final := id.finish(t, task)
		if final.Status != "failed" || final.Reason != "approval_rejected" {
			t.Fatalf("the task ended %s (%s)", final.Status, final.Reason)
		}
		if got := id.answerFile(task); got != "" {
			t.Fatalf("a rejected question was answered: %q", got)
		}
	})

	t.Run("daemon killed while waiting", func(t *testing.T) {
		task := id.create(t)
		first := id.question(t, task)
		id.d.kill(t)
		id.start(t)
		if st := id.status(t, task); st.Status != "interrupted" || st.Reason != "host_restart" {
			t.Fatalf("after the restart the task is %s (%s)", st.Status, st.Reason)
		}
		var v oneTask
		id.d.cliJSON(t, &v, "task", "resume", task)
		again := id.question(t, task)
		if again.ID == first.ID || again.Prompt != first.Prompt {
			t.Fatalf("asked again %+v; first %+v", again, first)
		}
		id.d.cliJSON(t, &struct {
			Approval approvalJSON `json:"approval"`
		}{}, "approve", again.ID, "--value", `"after the restart"`)
		final := id.finish(t, task)
		if final.Status != "completed" || string(final.Result) != `{"answer":"after the restart"}` {
			t.Fatalf("the task ended %s (%s) with %s", final.Status, final.Reason, final.Result)
		}
		var statuses []string
		for _, a := range id.approvalsOf(t, task) {
			statuses = append(statuses, a.Status)
		}
		if strings.Join(statuses, ",") != "cancelled,approved" {
			t.Fatalf("the task's questions ended %v; want the cut-off one cancelled and the one asked again approved", statuses)
		}
		if steps := id.status(t, task).Budgets["steps"]; steps.Used != 3 {
			t.Fatalf("steps %+v: want 3 used (the pause, the cut-off wait, the answered step)", steps)
		}
	})
}

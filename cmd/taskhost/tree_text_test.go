package main

import (
	"strings"
	"testing"

	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// task status shows a task's tree indented by depth, the shown task
// marked; task list adds PARENT and CHILDREN columns when a listed task
// was delegated, and keeps its old shape otherwise.
func TestTreeViews(t *testing.T) {
	tree := []*apipb.Task{
		{Id: "t_root", Status: "blocked", Reason: "waiting_children"},
		{Id: "t_mid", ParentTaskId: "t_root", RootTaskId: "t_root", TreeDepth: 1, Status: "blocked", Reason: "waiting_children"},
		{Id: "t_leaf", ParentTaskId: "t_mid", RootTaskId: "t_root", TreeDepth: 2, Status: "running"},
		{Id: "t_mid2", ParentTaskId: "t_root", RootTaskId: "t_root", TreeDepth: 1, Status: "completed"},
	}
	var b strings.Builder
	writeTree(&b, "t_leaf", tree)
	want := "\ntree:\n  t_root blocked (waiting_children)\n    t_mid blocked (waiting_children)\n      t_leaf running  <- this task\n    t_mid2 completed\n"
	if b.String() != want {
		t.Fatalf("tree view:\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	writeTree(&b, "t_x", nil)
	if b.Len() != 0 {
		t.Fatalf("a task without a tree shows %q", b.String())
	}
	b.Reset()
	writeTaskTable(&b, tree)
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], "PARENT") || !strings.Contains(lines[0], "CHILDREN") ||
		!strings.HasPrefix(strings.Fields(lines[1])[1], "-") || strings.Fields(lines[1])[2] != "2" || strings.Fields(lines[2])[1] != "t_root" {
		t.Fatalf("tree table:\n%s", b.String())
	}
	b.Reset()
	writeTaskTable(&b, tree[:1])
	if strings.Contains(b.String(), "PARENT") {
		t.Fatalf("a listing without delegated tasks changed shape:\n%s", b.String())
	}
}

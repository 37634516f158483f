package main

import (
	"strings"
	"testing"

	"github.com/taskhost/taskhost/store"
)

// task status shows a task's tree indented by depth, the shown task
// marked; task list adds PARENT and CHILDREN columns when a listed task
// was delegated, and keeps its old shape otherwise.
func TestTreeViews(t *testing.T) {
	tree := []store.Task{
		{ID: "t_root", Status: store.StatusBlocked, Reason: store.ReasonWaitingChildren},
		{ID: "t_mid", ParentID: "t_root", RootID: "t_root", TreeDepth: 1, Status: store.StatusBlocked, Reason: store.ReasonWaitingChildren},
		{ID: "t_leaf", ParentID: "t_mid", RootID: "t_root", TreeDepth: 2, Status: store.StatusRunning},
		{ID: "t_mid2", ParentID: "t_root", RootID: "t_root", TreeDepth: 1, Status: store.StatusCompleted},
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
	writeTaskTable(&b, tree, nil)
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], "PARENT") || !strings.Contains(lines[0], "CHILDREN") ||
		!strings.HasPrefix(strings.Fields(lines[1])[1], "-") || strings.Fields(lines[1])[2] != "2" || strings.Fields(lines[2])[1] != "t_root" {
		t.Fatalf("tree table:\n%s", b.String())
	}
	b.Reset()
	writeTaskTable(&b, tree[:1], nil)
	if strings.Contains(b.String(), "PARENT") {
		t.Fatalf("a listing without delegated tasks changed shape:\n%s", b.String())
	}
}

package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestBackupWhileOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(dir, "a.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateTask(ctx, NewTask{ID: "t_1", PrincipalID: "alice", Executor: "x", Spec: []byte(`{"goal":"g"}`),
		Limits: Budgets{Steps: Budget{Limit: 1}, WallMillis: Budget{Limit: 1000}}}); err != nil {
		t.Fatal(err)
	}
	// A read-only store beside the writer, as `taskhost backup` opens it.
	ro, err := Open(ctx, filepath.Join(dir, "a.db"), Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	dst := filepath.Join(dir, "b.db")
	if err := ro.Backup(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, %v", fi, err)
	}
	if err := ro.Backup(ctx, dst); err == nil {
		t.Fatal("a second backup over the first succeeded")
	}
	b, err := Open(ctx, dst, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if task, err := b.GetTask(ctx, "alice", "t_1"); err != nil || task.ID != "t_1" {
		t.Fatalf("backup lacks the task: %+v %v", task, err)
	}
	// The reader still refuses writes after the backup.
	if _, err := ro.CreateTask(ctx, NewTask{ID: "t_2", PrincipalID: "alice", Executor: "x", Spec: []byte(`{"goal":"g"}`),
		Limits: Budgets{Steps: Budget{Limit: 1}, WallMillis: Budget{Limit: 1000}}}); err == nil {
		t.Fatal("read-only store wrote after a backup")
	}
}

package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testwait"
)

// `taskhost restore --user U` into a directory U may write: U swaps the
// data dir Restore just made for a symlink to a root-owned directory, over
// and over, while root restores again and again. Restore holds the
// directory it made by descriptor from its first lookup on, so the victim
// is never chowned to U and never gets a file, however the swaps land. The
// code before chowned by path after the mkdir, and lost within a few tries.
func TestRestoreForAnotherUserSurvivesSymlinkSwaps(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: restoring for another user, and that user racing it")
	}
	const attacker = 1_999_000_123 // no account; outside the command uid range
	src := testwait.ShortTempDir(t)
	interruptedWithCheckpoint(t, src)
	backup := filepath.Join(testwait.ShortTempDir(t), "backup")
	if _, err := datadir.Backup(context.Background(), src, backup); err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "th-restore-race-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	parent, victim := filepath.Join(base, "p"), filepath.Join(base, "victim")
	for _, d := range []string{parent, victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(parent, attacker, attacker); err != nil {
		t.Fatal(err)
	}

	// The attacker: whenever the data dir is a real directory, move it
	// aside and put a symlink to the victim in its place.
	race := exec.Command("/bin/sh", "-c", `cd "$1" || exit 1; i=0
		while [ ! -e stop ]; do
			if [ -d d ] && [ ! -L d ] && mv d "x$i" 2>/dev/null; then ln -s ../victim d; i=$((i+1)); fi
		done
		echo "$i" > count`, "race", parent)
	race.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attacker, Gid: attacker}}
	if err := race.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() int {
		if !stopped {
			stopped = true
			os.WriteFile(filepath.Join(parent, "stop"), nil, 0o644) //nolint:errcheck // the wait below reports a stuck racer
			if err := race.Wait(); err != nil {
				t.Errorf("racer: %v", err)
			}
		}
		data, _ := os.ReadFile(filepath.Join(parent, "count"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		return n
	}
	defer stop()

	target := filepath.Join(parent, "d")
	var restored, refused int
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; restored+refused < 20000 && time.Now().Before(deadline); i++ {
		if _, err := Restore(context.Background(), backup, target, datadir.RestoreOptions{UID: attacker, GID: attacker}); err != nil {
			refused++
		} else {
			restored++
		}
		if fi, err := os.Lstat(victim); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Fatalf("try %d: the victim was given away (%v, %v)", i, fi.Sys().(*syscall.Stat_t).Uid, err)
		}
		if names, _ := os.ReadDir(victim); len(names) > 0 {
			t.Fatalf("try %d: restore wrote %q into the victim", i, names[0].Name())
		}
		// Make room for the next try: whatever d is now goes.
		if fi, err := os.Lstat(target); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			os.Remove(target)
		} else if err == nil {
			os.RemoveAll(target)
		}
		if i%200 == 199 && i >= 1000 {
			if n := countSwaps(parent); n >= 1000 {
				break
			}
		}
	}
	swaps := stop()
	t.Logf("%d restores done, %d refused, %d symlink swaps raced them, 0 wins", restored, refused, swaps)
	if swaps < 1000 {
		t.Errorf("only %d swaps raced the restores, want at least 1,000", swaps)
	}
}

// countSwaps counts the directories the racer moved aside so far.
func countSwaps(parent string) int {
	names, _ := filepath.Glob(filepath.Join(parent, "x*"))
	return len(names)
}

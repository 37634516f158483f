package main

import (
	"context"
	"flag"
	"fmt"
	"os/user"
	"strconv"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/datadir"
)

func backupCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	dataDir := fs.String("data-dir", defaultDataDir(), "data directory; env TASKHOST_DATA_DIR")
	jsonOut := fs.Bool("json", false, `print {"backup": DIR, "store_bytes": N}`)
	fs.Usage = usageFunc(fs, "taskhost backup [--data-dir DIR] BACKUP-DIR",
		"Writes a backup of the data dir to BACKUP-DIR, a new directory (mode 0700)\nholding "+datadir.StoreFile+" (a consistent copy of the store made with SQLite's\nVACUUM INTO in one read transaction: safe while the daemon runs) and\n"+datadir.KeyFile+" (the key every checkpoint is sealed with), each mode 0600.\nRestore it with 'taskhost restore BACKUP-DIR --data-dir NEW-DIR'.")
	pos, code, ok := parseArgs(e, fs, args, 1, 1)
	if !ok {
		return code
	}
	info, err := datadir.Backup(ctx, *dataDir, pos[0])
	if err != nil {
		errorf(e, "%v", err)
		return exitUnavailable
	}
	if *jsonOut {
		newPrinter(e, true).emit(map[string]any{"backup": info.Dir, "store_bytes": info.StoreBytes})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "wrote %s: %s (%d bytes) and %s\n", info.Dir, datadir.StoreFile, info.StoreBytes, datadir.KeyFile)
	return exitOK
}

func restoreCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "the data directory to restore into: new, or an empty directory (required)")
	owner := fs.String("user", "", "user (name or uid) the daemon runs as, who will own the data dir (default: you; other users need root)")
	jsonOut := fs.Bool("json", false, `print {"data_dir": DIR, "checkpoints_verified": N}`)
	fs.Usage = usageFunc(fs, "taskhost restore BACKUP-DIR --data-dir DIR [--user USER]",
		"Restores a backup written by 'taskhost backup' into DIR: the store and the host\nkey, each mode 0600, in a data dir of mode 0700, all owned by --user. DIR must\nnot exist or be an empty directory the daemon would trust (its user's, not a\nsymlink, not writable by group or others); anything else is refused and left\nas it was. Every checkpoint in the store is then verified with the restored\nkey; if one fails, what was written is removed again.")
	pos, code, ok := parseArgs(e, fs, args, 1, 1)
	if !ok {
		return code
	}
	if *dataDir == "" {
		errorf(e, "restore: --data-dir is required: the directory to restore into")
		return exitUsage
	}
	opts := datadir.RestoreOptions{UID: -1, GID: -1}
	if *owner != "" {
		uid, gid, err := lookupUser(*owner)
		if err != nil {
			errorf(e, "restore: --user %s: %v", *owner, err)
			return exitUsage
		}
		opts.UID, opts.GID = uid, gid
	}
	info, err := host.Restore(ctx, pos[0], *dataDir, opts)
	if err != nil {
		// The backup or the target is not acceptable; nothing was left.
		errorf(e, "%v", err)
		return exitConflict
	}
	if *jsonOut {
		newPrinter(e, true).emit(map[string]any{"data_dir": *dataDir, "checkpoints_verified": info.Checkpoints})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "restored %s into %s; %d checkpoints verified with the restored key\n", pos[0], *dataDir, info.Checkpoints)
	return exitOK
}

// lookupUser resolves a user name or numeric uid to its uid and primary gid.
func lookupUser(s string) (uid, gid int, err error) {
	var u *user.User
	if _, perr := strconv.ParseUint(s, 10, 32); perr == nil {
		u, err = user.LookupId(s)
	} else {
		u, err = user.Lookup(s)
	}
	if err != nil {
		return 0, 0, err
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return 0, 0, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	if gid, err = strconv.Atoi(u.Gid); err != nil {
		return 0, 0, fmt.Errorf("gid %q: %w", u.Gid, err)
	}
	return uid, gid, nil
}

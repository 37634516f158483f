package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/store"
)

func backupCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	dataDir := fs.String("data-dir", defaultDataDir(), "data directory; env TASKHOST_DATA_DIR")
	jsonOut := fs.Bool("json", false, `print {"backup": FILE, "bytes": N}`)
	fs.Usage = usageFunc(fs, "taskhost backup [--data-dir DIR] FILE",
		"Writes a consistent copy of the store to FILE (which must not exist) with\nSQLite's VACUUM INTO, in one read transaction: safe while the daemon runs.\nThe copy is mode 0600. Back up host.key too (see docs/operations.md).")
	pos, code, ok := parseArgs(e, fs, args, 1, 1)
	if !ok {
		return code
	}
	st, err := store.Open(ctx, filepath.Join(*dataDir, host.StoreFile), store.Options{ReadOnly: true})
	if err != nil {
		errorf(e, "%v", err)
		return exitUnavailable
	}
	defer st.Close()
	if err := st.Backup(ctx, pos[0]); err != nil {
		errorf(e, "%v", err)
		return exitUnavailable
	}
	fi, err := os.Stat(pos[0])
	if err != nil {
		errorf(e, "%v", err)
		return exitUnavailable
	}
	if *jsonOut {
		newPrinter(e, true).emit(map[string]any{"backup": pos[0], "bytes": fi.Size()})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "wrote %s (%d bytes)\n", pos[0], fi.Size())
	return exitOK
}

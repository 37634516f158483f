package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
)

// walSync is how a SQLite store at synchronous=FULL makes its commits
// durable: the writer connection commits at synchronous=NORMAL (the log is
// written, not synced), and the commit's caller then waits for one fsync of
// the write-ahead log that started after its commit returned. One fsync
// makes every commit before it durable, so commits that land while one is
// under way share the next; and the writer is free for the next commit
// while the log syncs, so the statements of the next steps overlap the
// fsync instead of queueing behind it. SQLite at FULL syncs inside COMMIT,
// holding the only write lock, which serialises every step's fsync with
// every other step's statements.
//
// It keeps FULL's two promises. A write returns only once its commit is on
// disk. A read returns nothing that is not on disk: after reading, it waits
// for the fsync of every commit that could have been visible to it (every
// ticket handed out by then), so no reader acts on, or shows a watcher, a
// state that power loss could take back.
//
// Commits are serialised on the store's one writer connection and take
// their tickets inside their transaction, just before COMMIT: tickets are
// in commit order, and when ticket n's COMMIT has returned, so have all
// before it.
type walSync struct {
	wal, dir string

	mu   sync.Mutex
	cond sync.Cond
	// started is the last ticket handed out; done the highest whose
	// COMMIT has returned (with or without success); flushed the highest
	// made durable. flushed <= done <= started.
	started, done, flushed uint64
	// flushing is how many fsyncs are under way, covering up to ticket
	// covering.
	flushing int
	covering uint64
	waiting  int // callers blocked in wait, for the tests
	// err is the first failed fsync: the kernel may have dropped the
	// pages it could not write, so no later fsync proves anything, and
	// every later write and read reports it.
	err error
	// ino is the inode of the log last synced: a new log (SQLite removes
	// it when the last connection closes) has its directory entry synced
	// too, as SQLite does for a file it creates.
	ino atomic.Uint64
	// flushes counts fsyncs of the log, for the tests and benchmarks.
	flushes uint64
	// hold, when set (by tests), is called before each fsync with the
	// ticket it will cover; a non-nil error stands for a failed fsync.
	hold func(target uint64) error
}

func newWALSync(path string) *walSync {
	w := &walSync{wal: path + "-wal", dir: filepath.Dir(path)}
	w.cond.L = &w.mu
	return w
}

// begin hands out the ticket of a commit about to be sent, or 0 without a
// walSync (PostgreSQL, synchronous=NORMAL): then nothing waits.
func (w *walSync) begin() uint64 {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started++
	return w.started
}

// end records that ticket's COMMIT returned, committed or not.
func (w *walSync) end(ticket uint64) {
	if w == nil || ticket == 0 {
		return
	}
	w.mu.Lock()
	w.done = max(w.done, ticket)
	w.cond.Broadcast()
	w.mu.Unlock()
}

// failed is the sticky fsync failure, if any.
func (w *walSync) failed() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// visible waits until everything a read that has just finished could have
// seen is durable.
func (w *walSync) visible() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	t := w.started
	w.mu.Unlock()
	return w.wait(t)
}

// maxFlushes bounds the fsyncs of the log under way at once. A commit
// that lands just after an fsync began need not wait for it to end before
// its own begins (a step would then wait one and a half fsyncs on
// average); one that lands while two are under way waits for them, and
// shares the next with every other commit that does.
const maxFlushes = 2

// wait returns once ticket is durable: by an fsync that began after the
// ticket's COMMIT returned — the caller's own, or another caller's that
// covers it (an fsync covers every commit that returned before it began).
func (w *walSync) wait(ticket uint64) error {
	if w == nil || ticket == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushed < ticket {
		if w.err != nil {
			return w.err
		}
		if w.done < ticket || w.covering >= ticket || w.flushing >= maxFlushes {
			w.waiting++
			w.cond.Wait()
			w.waiting--
			continue
		}
		w.flushing++
		target := w.done
		w.covering = max(w.covering, target)
		w.mu.Unlock()
		err := w.flush(target)
		w.mu.Lock()
		w.flushing--
		w.flushes++
		if err != nil {
			w.err = &UnavailableError{Class: "I/O error", Err: fmt.Errorf("store file %s: fsync of the write-ahead log: %w", w.wal, err)}
		} else {
			w.flushed = max(w.flushed, target)
		}
		w.cond.Broadcast()
	}
	return nil
}

// stats returns the tickets handed out, the fsyncs made and the callers
// waiting for one.
func (w *walSync) stats() (commits, flushes uint64, waiting int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started, w.flushes, w.waiting
}

// flush syncs the log's data. The log is opened afresh each time: SQLite may have removed
// it and made a new one, and a descriptor of the old file would sync
// nothing of the new.
func (w *walSync) flush(target uint64) error {
	if w.hold != nil {
		if err := w.hold(target); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(w.wal, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// SQLite removes the log only once all of it is checkpointed into
		// the database file and that file is synced.
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Ino != w.ino.Load() {
		if err := syncDir(w.dir); err != nil {
			return err
		}
		w.ino.Store(st.Ino)
	}
	return fdatasync(f)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// visibleRow is a read's *sql.Row that, once scanned, waits until what it
// read is durable (walSync.visible).
type visibleRow struct {
	s     *Store
	ctx   context.Context
	query string
	args  []any
}

func (r visibleRow) Scan(dest ...any) error {
	var err error
	for range maxReadTries {
		err = r.s.queryRow(r.ctx, r.query, r.args).Scan(dest...)
		if !r.s.rereadable(r.ctx, err) {
			break
		}
		r.s.observeRetry(retryCode(err))
	}
	if err != nil {
		return r.s.dbErr(err)
	}
	return r.s.sync.visible()
}

// visibleRows is a read's *sql.Rows that, once closed, waits until what
// it read is durable; every reader closes its rows before it returns what
// it read. An error met while iterating is typed as dbErr types it (rows
// are not read again: some were already handed out).
type visibleRows struct {
	*sql.Rows
	s *Store
}

func (r visibleRows) Err() error { return r.s.dbErr(r.Rows.Err()) }

func (r visibleRows) Close() error {
	err := r.Rows.Close()
	if verr := r.s.sync.visible(); verr != nil && err == nil {
		return verr
	}
	return err
}

package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// A task's workspace lives in the store (store/workspace.go); the
// directory <data dir>/workspaces/<task id> is this host's working copy of
// it. When a run starts, the host makes the directory the stored
// workspace (materialise): it writes the files that are missing or differ
// and removes what the store does not hold, so every run, on this host or
// another, starts from the workspace as of the task's last committed step.
// When a step completes, the host stores what the step changed (changes):
// it compares each file's stat with what it saw last, hashes only the
// files whose stat moved, and hands the store the files whose content or
// mode changed and the paths that went, with the step's outcome. Files an
// attempt wrote before it crashed are therefore never stored, and the next
// run's materialise removes them.
//
// Regular files and symlinks are kept; directories only as the paths of
// their files (an empty one is not); FIFOs and sockets not at all.

// maxWorkspaceWalk bounds the entries one walk of a workspace visits,
// directories included: the store's file limit bounds what is kept, this
// bounds what a command can make the host look at.
const maxWorkspaceWalk = 1 << 20

// racyWindow: a file modified this close to the walk that saw it may be
// modified again within the same timestamp tick, so its stat is not
// trusted to stand for its content next time; it is hashed again.
const racyWindow = 2 * time.Second

// wsEntry is what the host knows of one stored file.
type wsEntry struct {
	mode uint32 // Unix type and permission bits
	size int64
	sha  string
	// seen is the local file's stat when it last matched the stored file;
	// zero: unknown (hash it before trusting it).
	seen statKey
}

type statKey struct {
	ino, mtime, ctime, size int64
	mode                    uint32
}

// workspaceSync is one run's view of its task's stored workspace.
type workspaceSync struct {
	taskID string
	// parent is <data dir>/workspaces; the task's directory is opened
	// through it, so a directory replaced by a symlink is refused.
	parent   string
	stored   bool
	files    map[string]wsEntry
	maxBytes int64
	maxFiles int
	// now is the clock a walk is dated by (nil: time.Now); a file
	// changed within racyWindow of it is hashed again next time.
	now func() time.Time
}

func (ws *workspaceSync) clock() time.Time {
	if ws.now != nil {
		return ws.now()
	}
	return time.Now()
}

// workspaceLimits are the store's bounds of a stored workspace.
func workspaceLimits(st *store.Store) (int64, int) {
	l := st.Limits()
	return int64(l.WorkspaceBytes), l.WorkspaceFiles
}

// loadWorkspace reads task id's stored manifest.
func (r *Runner) loadWorkspace(ctx context.Context, principal, id string) (*workspaceSync, error) {
	w, err := r.store.TaskWorkspace(ctx, principal, id)
	if err != nil {
		return nil, err
	}
	ws := &workspaceSync{taskID: id, parent: r.workspaceRoot, stored: w.Stored, files: make(map[string]wsEntry, len(w.Files))}
	ws.maxBytes, ws.maxFiles = workspaceLimits(r.store)
	for _, f := range w.Files {
		ws.files[f.Path] = wsEntry{mode: f.Mode, size: f.Size, sha: f.SHA256}
	}
	return ws, nil
}

// open opens the task's directory, creating it (0700) when missing. It
// runs at every step: the directories are made only when an open finds
// them missing (a mkdir of an existing one costs as much as the open).
func (ws *workspaceSync) open() (*os.Root, error) {
	parent, err := os.OpenRoot(ws.parent)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(ws.parent, 0o700); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		parent, err = os.OpenRoot(ws.parent)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	defer parent.Close()
	root, err := parent.OpenRoot(ws.taskID)
	if errors.Is(err, fs.ErrNotExist) {
		if err := parent.Mkdir(ws.taskID, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		root, err = parent.OpenRoot(ws.taskID)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return root, nil
}

// localFile is one kept file of the working copy as a walk found it.
type localFile struct {
	mode uint32
	key  statKey
}

// walk lists the working copy's regular files and symlinks by path, its
// directories, and the other entries (FIFOs, sockets: not kept).
func (ws *workspaceSync) walk(ctx context.Context, root *os.Root) (files map[string]localFile, dirs, other []string, err error) {
	files = make(map[string]localFile)
	n := 0
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if n++; n > maxWorkspaceWalk {
			return fmt.Errorf("the workspace holds more than %d entries", maxWorkspaceWalk)
		}
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			dirs = append(dirs, p)
		case info.Mode().IsRegular() || info.Mode()&fs.ModeSymlink != 0:
			files[p] = localFile{mode: unixMode(info), key: keyOf(info)}
		default:
			other = append(other, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("workspace %s: walk: %w", ws.taskID, err)
	}
	return files, dirs, other, nil
}

func unixMode(info fs.FileInfo) uint32 {
	if info.Mode()&fs.ModeSymlink != 0 {
		return syscall.S_IFLNK | 0o777
	}
	return syscall.S_IFREG | uint32(info.Mode().Perm())
}

func keyOf(info fs.FileInfo) statKey {
	k := statKey{size: info.Size(), mode: unixMode(info)}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		k.ino, k.mtime, k.ctime = int64(st.Ino), st.Mtim.Nano(), st.Ctim.Nano()
	}
	return k
}

// trusted is key, or zero when the file changed too recently for its stat
// to stand for its content.
func trusted(key statKey, walked time.Time) statKey {
	if time.Unix(0, max(key.mtime, key.ctime)).After(walked.Add(-racyWindow)) {
		return statKey{}
	}
	return key
}

// readLocal returns a kept file's content: a regular file's bytes (at
// most limit), a symlink's target.
func readLocal(root *os.Root, p string, mode uint32, limit int64) ([]byte, error) {
	if mode&syscall.S_IFMT == syscall.S_IFLNK {
		target, err := root.Readlink(p)
		return []byte(target), err
	}
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s grew past %d bytes while read", p, limit)
	}
	return b, err
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// changes compares the working copy with the stored workspace and returns
// what changed since (nil when nothing did and a workspace is stored),
// with the manifest the store holds once the change is committed. A
// workspace past a limit is a *store.WorkspaceLimitError naming it.
func (ws *workspaceSync) changes(ctx context.Context) (*store.WorkspaceChange, map[string]wsEntry, error) {
	root, err := ws.open()
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	walked := ws.clock()
	local, _, _, err := ws.walk(ctx, root)
	if err != nil {
		return nil, nil, err
	}
	if len(local) > ws.maxFiles {
		return nil, nil, &store.WorkspaceLimitError{TaskID: ws.taskID, Limit: "workspace_files", Max: int64(ws.maxFiles), Got: int64(len(local))}
	}
	var total int64
	for _, lf := range local {
		total += lf.key.size
	}
	if total > ws.maxBytes {
		return nil, nil, &store.WorkspaceLimitError{TaskID: ws.taskID, Limit: "workspace_bytes", Max: ws.maxBytes, Got: total}
	}
	change := &store.WorkspaceChange{}
	next := make(map[string]wsEntry, len(local))
	for _, p := range slices.Sorted(maps.Keys(local)) {
		lf := local[p]
		old, ok := ws.files[p]
		if ok && old.seen != (statKey{}) && old.seen == lf.key {
			next[p] = old
			continue
		}
		if !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
			return nil, nil, fmt.Errorf("workspace %s: file name %q is not UTF-8: the store keeps UTF-8 names only; rename it", ws.taskID, p)
		}
		b, err := readLocal(root, p, lf.mode, ws.maxBytes)
		if err != nil {
			return nil, nil, fmt.Errorf("workspace %s: read %s: %w", ws.taskID, p, err)
		}
		e := wsEntry{mode: lf.mode, size: int64(len(b)), sha: hashOf(b), seen: trusted(lf.key, walked)}
		next[p] = e
		if ok && old.sha == e.sha && old.mode == e.mode {
			continue // touched, not changed
		}
		change.Put = append(change.Put, store.WorkspaceFile{Path: p, Mode: e.mode, Size: e.size, SHA256: e.sha, Content: b})
	}
	for _, p := range slices.Sorted(maps.Keys(ws.files)) {
		if _, ok := local[p]; !ok {
			change.Delete = append(change.Delete, p)
		}
	}
	if ws.stored && len(change.Put) == 0 && len(change.Delete) == 0 {
		return nil, next, nil
	}
	return change, next, nil
}

// committed records that the store now holds next.
func (ws *workspaceSync) committed(next map[string]wsEntry) {
	ws.files, ws.stored = next, true
}

// workspaceFetcher reads one stored file's content.
type workspaceFetcher func(ctx context.Context, path string) ([]byte, error)

// materialise makes the working copy the stored workspace: it removes
// what the store does not hold and writes what is missing or differs,
// each file whole (written beside it, then renamed over it). A task with
// no stored workspace keeps its working copy as it is.
func (ws *workspaceSync) materialise(ctx context.Context, fetch workspaceFetcher) error {
	if !ws.stored {
		return nil
	}
	root, err := ws.open()
	if err != nil {
		return err
	}
	defer root.Close()
	walked := ws.clock()
	local, dirs, other, err := ws.walk(ctx, root)
	if err != nil {
		return err
	}
	for _, p := range other {
		if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("workspace %s: remove %s: %w", ws.taskID, p, err)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(local)) {
		if _, ok := ws.files[p]; !ok {
			if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("workspace %s: remove %s: %w", ws.taskID, p, err)
			}
		}
	}
	if err := ws.pruneDirs(root, dirs); err != nil {
		return err
	}
	for _, p := range slices.Sorted(maps.Keys(ws.files)) {
		e := ws.files[p]
		if lf, ok := local[p]; ok && lf.mode == e.mode && lf.key.size == e.size {
			if b, err := readLocal(root, p, lf.mode, ws.maxBytes); err == nil && hashOf(b) == e.sha {
				e.seen = trusted(lf.key, walked)
				ws.files[p] = e
				continue
			}
		}
		b, err := fetch(ctx, p)
		if err != nil {
			return fmt.Errorf("workspace %s: %s: %w", ws.taskID, p, err)
		}
		if err := placeFile(root, p, e.mode, b); err != nil {
			return fmt.Errorf("workspace %s: write %s: %w", ws.taskID, p, err)
		}
		e.seen = statKey{} // just written: hashed again at the next step's end
		ws.files[p] = e
	}
	return nil
}

// pruneDirs removes, deepest first, the directories no stored file is
// in; a file stored where a directory is removes that directory whole.
func (ws *workspaceSync) pruneDirs(root *os.Root, dirs []string) error {
	keep := map[string]bool{}
	for p := range ws.files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			keep[d] = true
		}
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range dirs {
		_, isFile := ws.files[d]
		if keep[d] && !isFile {
			continue
		}
		if err := root.RemoveAll(d); err != nil {
			return fmt.Errorf("workspace %s: remove %s: %w", ws.taskID, d, err)
		}
	}
	return nil
}

// placeFile writes content at p with mode, replacing whatever is there.
func placeFile(root *os.Root, p string, mode uint32, content []byte) error {
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	tmp := path.Join(path.Dir(p), ".taskhost-restore-"+hashOf([]byte(p))[:16])
	_ = root.Remove(tmp)
	if mode&syscall.S_IFMT == syscall.S_IFLNK {
		if err := root.Symlink(string(content), tmp); err != nil {
			return err
		}
	} else if err := writeWhole(root, tmp, fs.FileMode(mode&0o777), content); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	if err := root.Rename(tmp, p); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return nil
}

func writeWhole(root *os.Root, p string, perm fs.FileMode, content []byte) error {
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// workspaceVerdict is the verdict on a completed step whose workspace
// could not be stored: past a limit the task fails (workspace_too_large);
// a working copy the host could not read interrupts it.
func workspaceVerdict(err error) verdict {
	if le, ok := errors.AsType[*store.WorkspaceLimitError](err); ok {
		return verdict{attempt: store.AttemptFailed, outcome: plugin.OutcomeFail, taskTo: store.StatusFailed,
			reason: store.ReasonWorkspaceTooLarge, message: text.Truncate(le.Error(), 2000)}
	}
	return verdict{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonStoreError,
		message: text.Truncate("the step's workspace was not read: "+err.Error(), 2000)}
}

// stepWorkspace is what attempt att, ending with v, changed in the
// workspace, to store with its outcome, and the manifest once stored: a
// completed step's only. A step whose workspace the store would refuse
// ends with workspaceVerdict instead, storing nothing.
func (ru *run) stepWorkspace(ctx context.Context, v verdict, att store.Attempt) (*store.WorkspaceChange, map[string]wsEntry, verdict) {
	if v.attempt != store.AttemptCompleted || ru.ws == nil {
		return nil, nil, v
	}
	change, next, err := ru.ws.changes(ctx)
	if err != nil {
		ru.r.log.Warn("step's workspace not stored", "task", ru.id, "attempt", att.Number, "error", err)
		return nil, nil, workspaceVerdict(err)
	}
	return change, next, v
}

// prepareWorkspace makes the working copy the stored workspace before the
// run's first step. A task from before workspaces were stored keeps its
// working copy until a step commits one.
func (ru *run) prepareWorkspace(ws *workspaceSync) bool {
	r := ru.r
	ru.ws = ws
	fetch := func(ctx context.Context, p string) ([]byte, error) {
		return r.store.WorkspaceContent(ctx, ru.principal, ru.id, p)
	}
	if err := ws.materialise(ru.ctx, fetch); err != nil {
		ru.log("workspace not restored", "error", err)
		ru.endRun(store.StatusInterrupted, store.ReasonStoreError, "the workspace was not restored from the store: "+err.Error())
		return false
	}
	return true
}

// seedChange is the stored workspace of a task created with files: the
// files seedWorkspace writes.
func seedChange(files []File) *store.WorkspaceChange {
	c := &store.WorkspaceChange{}
	for _, f := range files {
		c.Put = append(c.Put, store.WorkspaceFile{Path: f.Name, Mode: syscall.S_IFREG | 0o600, Size: int64(len(f.Data)),
			SHA256: hashOf(f.Data), Content: f.Data})
	}
	return c
}

// StoredWorkspace lists principal's task id's workspace as the store
// holds it (as of its last committed step), for a task whose run this host
// neither holds nor last held: its own copy of such a task is absent or
// stale (a task resumed on another host of a fleet). ok is false where this
// host's copy is the task's, or where the store holds none (a task from
// before workspaces were stored); the caller then reads the host's copy.
func (r *Runner) StoredWorkspace(ctx context.Context, principal, id string) (files []tools.StoredFile, ok bool, err error) {
	l, err := r.store.TaskLease(ctx, principal, id)
	if err != nil || l.Host == r.store.HostID() {
		return nil, false, err
	}
	w, err := r.store.TaskWorkspace(ctx, principal, id)
	if err != nil || !w.Stored {
		return nil, false, err
	}
	files = make([]tools.StoredFile, len(w.Files))
	for i, f := range w.Files {
		files[i] = tools.StoredFile{Path: f.Path, Symlink: f.Mode&syscall.S_IFMT == syscall.S_IFLNK, Size: f.Size}
	}
	return files, true, nil
}

// StoredWorkspaceFile is the stored content of the file at path of
// principal's task id's workspace (store.ErrNotFound when it holds none).
func (r *Runner) StoredWorkspaceFile(ctx context.Context, principal, id, path string) ([]byte, error) {
	return r.store.WorkspaceContent(ctx, principal, id, path)
}

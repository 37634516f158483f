package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// A task's workspace as of the last step that committed a change to it
// lives here: one row per file (workspace_files: path, mode, size, sha256,
// content) and one per task (workspaces: the attempt whose commit last
// changed it, and its totals). A step stores only what it changed — the
// files it wrote and the paths it removed — in the transaction that
// records its outcome (FinishAttempt.Workspace), so what is stored is
// always exactly some committed step's workspace: a crashed attempt's
// files never reach it. A host materialises the workspace from these rows
// when it starts a run of the task (host/workspace.go).

// Default bounds of a stored workspace (Limits.WorkspaceBytes and
// WorkspaceFiles). The bytes match host/tools.MaxWorkspaceBytes, what the
// workspace tools let a workspace hold; the files bound the manifest a
// host reads at the start of each run.
const (
	DefaultWorkspaceBytes = 64 << 20
	DefaultWorkspaceFiles = 1 << 16
	// MaxWorkspacePathBytes bounds a stored file's path.
	MaxWorkspacePathBytes = 4096
)

// WorkspaceFile is one file of a task's stored workspace: a regular file
// or a symlink (Mode carries the Unix file type and permission bits; a
// symlink's content is its target).
type WorkspaceFile struct {
	Path    string // slash-separated, relative, clean
	Mode    uint32
	Size    int64
	SHA256  string // lowercase hex of the content
	Content []byte // in a WorkspaceChange and from WorkspaceContent only
}

// WorkspaceChange is what one step changed in its task's workspace: the
// files to store (new or changed, with their content) and the paths it
// removed. A non-nil empty change records that the workspace is stored
// (as of the step) without changing a file.
type WorkspaceChange struct {
	Put    []WorkspaceFile
	Delete []string
}

// Bytes is the content the change writes.
func (c *WorkspaceChange) Bytes() int64 {
	var n int64
	for _, f := range c.Put {
		n += int64(len(f.Content))
	}
	return n
}

// Workspace is a task's stored workspace without the files' contents.
// Stored is false when none is: the task is from before workspaces were
// stored and no step of it has committed since. Attempt is the attempt
// whose commit last changed it; 0: the files the task started with.
type Workspace struct {
	Stored  bool
	Attempt int64
	Bytes   int64
	Files   []WorkspaceFile
}

// WorkspaceLimitError is a workspace over one of its bounds; it matches
// ErrTooLarge. Nothing of the step that met it was written.
type WorkspaceLimitError struct {
	TaskID string
	Limit  string // "workspace_bytes" or "workspace_files"
	Max    int64
	Got    int64
}

func (e *WorkspaceLimitError) Error() string {
	unit := "bytes"
	if e.Limit == "workspace_files" {
		unit = "files"
	}
	return fmt.Sprintf("task %s: the workspace would hold %d %s; the limit (%s) is %d", e.TaskID, e.Got, unit, e.Limit, e.Max)
}

func (e *WorkspaceLimitError) Is(target error) bool { return target == ErrTooLarge }

const (
	qWorkspaceTotals   = `SELECT files, bytes FROM workspaces WHERE task_id = $1`
	qWorkspaceFileSize = `SELECT size FROM workspace_files WHERE task_id = $1 AND path = $2`
	qDeleteWorkspaceAt = `DELETE FROM workspace_files WHERE task_id = $1 AND path = $2 RETURNING size`
	qPutWorkspaceFile  = `INSERT INTO workspace_files (task_id, path, mode, size, sha256, content, attempt)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (task_id, path) DO UPDATE SET mode = excluded.mode, size = excluded.size,
			sha256 = excluded.sha256, content = excluded.content, attempt = excluded.attempt`
	qPutWorkspace = `INSERT INTO workspaces (task_id, attempt, files, bytes) VALUES ($1, $2, $3, $4)
		ON CONFLICT (task_id) DO UPDATE SET attempt = excluded.attempt, files = excluded.files, bytes = excluded.bytes`
	qDeleteWorkspaceFiles = `DELETE FROM workspace_files WHERE task_id = $1`
	qDeleteWorkspace      = `DELETE FROM workspaces WHERE task_id = $1`

	qTaskWorkspace = `SELECT w.attempt, w.bytes FROM workspaces w JOIN tasks t ON t.id = w.task_id
		WHERE w.task_id = $1 AND t.principal_id = $2`
	qWorkspaceManifest = `SELECT path, mode, size, sha256 FROM workspace_files WHERE task_id = $1 ORDER BY path`
	qWorkspaceContent  = `SELECT f.content FROM workspace_files f JOIN tasks t ON t.id = f.task_id
		WHERE f.task_id = $1 AND t.principal_id = $2 AND f.path = $3`
)

func workspaceQueries() []string {
	return []string{qWorkspaceTotals, qWorkspaceFileSize, qDeleteWorkspaceAt, qPutWorkspaceFile, qPutWorkspace,
		qDeleteWorkspaceFiles, qDeleteWorkspace}
}

// checkWorkspaceChange validates c before anything is written: each path
// stored or removed is a clean relative UTF-8 path, each file's content
// matches its size, and the content written is within the byte limit.
func (s *Store) checkWorkspaceChange(taskID string, c *WorkspaceChange) error {
	if c == nil {
		return nil
	}
	if n := c.Bytes(); n > int64(s.lim.WorkspaceBytes) {
		return &WorkspaceLimitError{TaskID: taskID, Limit: "workspace_bytes", Max: int64(s.lim.WorkspaceBytes), Got: n}
	}
	if n := len(c.Put) + len(c.Delete); n > 2*s.lim.WorkspaceFiles {
		return &WorkspaceLimitError{TaskID: taskID, Limit: "workspace_files", Max: int64(s.lim.WorkspaceFiles), Got: int64(n)}
	}
	for _, f := range c.Put {
		if err := checkWorkspacePath(f.Path); err != nil {
			return err
		}
		switch {
		case int64(len(f.Content)) != f.Size:
			return invalidf("workspace file %q: size %d, content %d bytes", f.Path, f.Size, len(f.Content))
		case len(f.SHA256) != 64:
			return invalidf("workspace file %q: sha256 %q is not 64 hex digits", f.Path, f.SHA256)
		}
	}
	for _, p := range c.Delete {
		if err := checkWorkspacePath(p); err != nil {
			return err
		}
	}
	return nil
}

// checkWorkspacePath refuses a path the store would not give back as it
// was given (PostgreSQL's text holds no NUL and only UTF-8) or that would
// leave the workspace.
func checkWorkspacePath(p string) error {
	switch {
	case p == "" || len(p) > MaxWorkspacePathBytes:
		return invalidf("workspace path is %d bytes; it must be 1..%d", len(p), MaxWorkspacePathBytes)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		return invalidf("workspace path %q is not UTF-8 without NUL", p)
	case path.Clean(p) != p || path.IsAbs(p) || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return invalidf("workspace path %q is not a clean relative path", p)
	}
	return nil
}

// putWorkspace applies c, the change attempt made, to task id's stored
// workspace inside tx, which has already recorded the attempt's outcome.
// The totals are kept from the rows replaced and removed, so a step costs
// statements for the files it changed only; past a limit it returns a
// *WorkspaceLimitError and tx must be rolled back.
func (s *Store) putWorkspace(ctx context.Context, tx *txn, id string, attempt int64, c *WorkspaceChange) error {
	if c == nil {
		return nil
	}
	var files, bytes int64
	err := tx.QueryRowContext(ctx, qWorkspaceTotals, id).Scan(&files, &bytes)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("workspace of %s: %w", id, err)
	}
	for _, p := range c.Delete {
		var size int64
		err := tx.QueryRowContext(ctx, qDeleteWorkspaceAt, id, p).Scan(&size)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("workspace of %s: remove %q: %w", id, p, err)
		default:
			files, bytes = files-1, bytes-size
		}
	}
	for _, f := range c.Put {
		var old int64
		err := tx.QueryRowContext(ctx, qWorkspaceFileSize, id, f.Path).Scan(&old)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("workspace of %s: %q: %w", id, f.Path, err)
		default:
			files, bytes = files-1, bytes-old
		}
		if _, err := tx.ExecContext(ctx, qPutWorkspaceFile, id, f.Path, int64(f.Mode), f.Size, f.SHA256, nonNil(f.Content), attempt); err != nil {
			return fmt.Errorf("workspace of %s: store %q: %w", id, f.Path, err)
		}
		files, bytes = files+1, bytes+f.Size
	}
	if bytes > int64(s.lim.WorkspaceBytes) {
		return &WorkspaceLimitError{TaskID: id, Limit: "workspace_bytes", Max: int64(s.lim.WorkspaceBytes), Got: bytes}
	}
	if files > int64(s.lim.WorkspaceFiles) {
		return &WorkspaceLimitError{TaskID: id, Limit: "workspace_files", Max: int64(s.lim.WorkspaceFiles), Got: files}
	}
	if _, err := tx.ExecContext(ctx, qPutWorkspace, id, attempt, files, bytes); err != nil {
		return fmt.Errorf("workspace of %s: %w", id, err)
	}
	return nil
}

// nonNil keeps an empty file's content an empty blob, not NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// TaskWorkspace returns principal's task id's stored workspace: the
// manifest of its files without their contents, in path order. A task
// none of whose steps stored one has Attempt 0 and no files.
func (s *Store) TaskWorkspace(ctx context.Context, principal, id string) (Workspace, error) {
	var w Workspace
	err := s.readRow(ctx, qTaskWorkspace, id, principal).Scan(&w.Attempt, &w.Bytes)
	if errors.Is(err, sql.ErrNoRows) {
		return Workspace{}, s.taskExists(ctx, principal, id)
	}
	if err != nil {
		return Workspace{}, err
	}
	w.Stored = true
	rows, err := s.readRows(ctx, qWorkspaceManifest, id)
	if err != nil {
		return Workspace{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var f WorkspaceFile
		var mode int64
		if err := rows.Scan(&f.Path, &mode, &f.Size, &f.SHA256); err != nil {
			return Workspace{}, err
		}
		f.Mode = uint32(mode)
		w.Files = append(w.Files, f)
	}
	return w, rows.Err()
}

// WorkspaceContent returns the stored content of one file of principal's
// task id; ErrNotFound when the workspace holds no such file.
func (s *Store) WorkspaceContent(ctx context.Context, principal, id, path string) ([]byte, error) {
	var b []byte
	err := s.readRow(ctx, qWorkspaceContent, id, principal, path).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("task %s: workspace file %q: %w", id, path, ErrNotFound)
	}
	return b, err
}

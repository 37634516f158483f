package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"google.golang.org/grpc/codes"

	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

// Bounds of getting files out of a workspace.
const (
	// exportChunkBytes is one ReadTaskFile message's data: well within
	// the 4 MiB a gRPC client accepts by default.
	exportChunkBytes = 1 << 20
	// DefaultMaxExportFileBytes is the largest file ReadTaskFile sends
	// unless Options.MaxExportFileBytes says otherwise.
	DefaultMaxExportFileBytes = 1 << 30
	// maxExports bounds concurrent ReadTaskFile streams: each holds an
	// open file and a chunk buffer.
	maxExports = 16
)

// Reasons of the file calls.
const (
	ReasonFileTooLarge = "FILE_TOO_LARGE"
	ReasonExportLimit  = "EXPORT_LIMIT"
)

// Deleter removes a finished task; *host.Runner implements it.
type Deleter interface {
	Delete(ctx context.Context, principal, id string) error
}

// StoredWorkspaces reads, from the store, the workspace of a task whose run
// this host neither holds nor last held; *host.Runner implements it.
type StoredWorkspaces interface {
	// StoredWorkspace lists the task's stored files; ok is false where
	// the host's own copy is the task's.
	StoredWorkspace(ctx context.Context, principal, id string) (files []tools.StoredFile, ok bool, err error)
	StoredWorkspaceFile(ctx context.Context, principal, id, path string) ([]byte, error)
}

// stored is the task's workspace as the store holds it, where that is the
// one to read (ok false: the host's copy under the workspace root).
func (ts *taskService) stored(ctx context.Context, principal, id string) ([]tools.StoredFile, bool, error) {
	if ts.s.opts.StoredWorkspaces == nil {
		return nil, false, nil
	}
	return ts.s.opts.StoredWorkspaces.StoredWorkspace(ctx, principal, id)
}

// workspaceOf checks that the caller owns task id (another principal's
// task is NotFound like a missing one) and returns the workspace root.
func (ts *taskService) workspaceOf(ctx context.Context, principal, id string) (string, error) {
	if err := checkID("task_id", id); err != nil {
		return "", err
	}
	if ts.s.opts.WorkspaceRoot == "" {
		return "", statusError(codes.Unimplemented, ReasonInternal, "this daemon does not export workspaces")
	}
	if _, err := ts.s.opts.Tasks.Get(ctx, principal, id); err != nil {
		return "", ts.s.toStatus(ctx, err, "task", id)
	}
	return ts.s.opts.WorkspaceRoot, nil
}

// fileStatus maps an error of the export functions to a status.
func (ts *taskService) fileStatus(ctx context.Context, err error, id, path string) error {
	var pe *tools.ExportPathError
	switch {
	case errors.As(err, &pe):
		return invalid("path", pe.Error())
	case errors.Is(err, fs.ErrNotExist):
		return notFound("file", fmt.Sprintf("%q of task %s", text.Clip(path, 100), id))
	}
	return ts.s.toStatus(ctx, err, "task", id)
}

func (ts *taskService) ListTaskFiles(ctx context.Context, req *apipb.ListTaskFilesRequest) (*apipb.ListTaskFilesResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	root, err := ts.workspaceOf(ctx, p, req.TaskId)
	if err != nil {
		return nil, err
	}
	files, fromStore, err := ts.stored(ctx, p, req.TaskId)
	if err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
	}
	var entries []tools.ExportEntry
	var truncated bool
	if fromStore {
		entries, truncated, err = tools.ListStored(ctx, files, req.Path)
	} else {
		entries, truncated, err = tools.ListExport(ctx, root, req.TaskId, req.Path)
	}
	if err != nil {
		return nil, ts.fileStatus(ctx, err, req.TaskId, req.Path)
	}
	resp := &apipb.ListTaskFilesResponse{Truncated: truncated, Files: make([]*apipb.TaskFile, 0, len(entries))}
	for _, e := range entries {
		f := &apipb.TaskFile{Path: e.Path, Type: e.Type, Size: e.Size}
		if !e.Modified.IsZero() {
			f.ModifiedUnixNano = e.Modified.UnixNano()
		}
		resp.Files = append(resp.Files, f)
	}
	return resp, nil
}

func (ts *taskService) ReadTaskFile(req *apipb.ReadTaskFileRequest, stream apipb.TaskService_ReadTaskFileServer) error {
	ctx := stream.Context()
	p, err := principalOf(ctx)
	if err != nil {
		return err
	}
	root, err := ts.workspaceOf(ctx, p, req.TaskId)
	if err != nil {
		return err
	}
	select {
	case ts.s.exports <- struct{}{}:
		defer func() { <-ts.s.exports }()
	default:
		return statusError(codes.ResourceExhausted, ReasonExportLimit, fmt.Sprintf("%d files are being read already; retry shortly", cap(ts.s.exports)))
	}
	f, size, err := ts.openFile(ctx, p, root, req.TaskId, req.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := stream.Send(&apipb.ReadTaskFileResponse{Size: size}); err != nil {
		return err
	}
	// Only the size announced is sent: a file still growing is cut there,
	// one that shrank comes short and the client sees the difference.
	if size == 0 {
		return nil
	}
	r := io.LimitReader(f, size)
	buf := make([]byte, min(size, exportChunkBytes))
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if err := stream.Send(&apipb.ReadTaskFileResponse{Data: buf[:n]}); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			ts.s.log.Error("read task file", "task", req.TaskId, "path", req.Path, "error", err)
			return statusError(codes.Internal, ReasonInternal, "reading the file failed; the daemon's log has the details")
		}
	}
}

// openFile opens the file path of task id's workspace for ReadTaskFile,
// from the store or from the host's copy (stored), within the daemon's
// bound of a file it sends; errors are statuses.
func (ts *taskService) openFile(ctx context.Context, principal, root, id, path string) (io.ReadCloser, int64, error) {
	files, fromStore, err := ts.stored(ctx, principal, id)
	if err != nil {
		return nil, 0, ts.s.toStatus(ctx, err, "task", id)
	}
	tooLarge := func(size int64) error {
		return statusError(codes.FailedPrecondition, ReasonFileTooLarge,
			fmt.Sprintf("%s of task %s is %d bytes; the daemon sends files of at most %d", text.Clip(path, 100), id, size, ts.s.opts.MaxExportFileBytes))
	}
	if fromStore {
		sf, err := tools.FindStored(files, path)
		if err != nil {
			return nil, 0, ts.fileStatus(ctx, err, id, path)
		}
		if sf.Size > ts.s.opts.MaxExportFileBytes {
			return nil, 0, tooLarge(sf.Size)
		}
		b, err := ts.s.opts.StoredWorkspaces.StoredWorkspaceFile(ctx, principal, id, sf.Path)
		if err != nil {
			return nil, 0, ts.fileStatus(ctx, err, id, path)
		}
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
	f, fi, err := tools.OpenExport(root, id, path)
	if err != nil {
		return nil, 0, ts.fileStatus(ctx, err, id, path)
	}
	if fi.Size() > ts.s.opts.MaxExportFileBytes {
		f.Close()
		return nil, 0, tooLarge(fi.Size())
	}
	return f, fi.Size(), nil
}

func (ts *taskService) DeleteTask(ctx context.Context, req *apipb.DeleteTaskRequest) (*apipb.DeleteTaskResponse, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("task_id", req.TaskId); err != nil {
		return nil, err
	}
	if ts.s.opts.Deleter == nil {
		return nil, statusError(codes.Unimplemented, ReasonInternal, "this daemon does not delete tasks")
	}
	if err := ts.s.opts.Deleter.Delete(ctx, p, req.TaskId); err != nil {
		return nil, ts.s.toStatus(ctx, err, "task", req.TaskId)
	}
	ts.s.log.Info("task deleted", "principal", p, "task", req.TaskId)
	return &apipb.DeleteTaskResponse{}, nil
}

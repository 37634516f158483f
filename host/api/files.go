package api

import (
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
	entries, truncated, err := tools.ListExport(ctx, root, req.TaskId, req.Path)
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
	f, fi, err := tools.OpenExport(root, req.TaskId, req.Path)
	if err != nil {
		return ts.fileStatus(ctx, err, req.TaskId, req.Path)
	}
	defer f.Close()
	size, limit := fi.Size(), ts.s.opts.MaxExportFileBytes
	if size > limit {
		return statusError(codes.FailedPrecondition, ReasonFileTooLarge,
			fmt.Sprintf("%s of task %s is %d bytes; the daemon sends files of at most %d", text.Clip(req.Path, 100), req.TaskId, size, limit))
	}
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

package store

import "context"

// CheckpointedTasks returns up to limit (default 100, at most 1000) tasks of
// every principal that hold a checkpoint, with it, in creation order after
// afterSeq: what a restore verifies against the restored key.
func (s *Store) CheckpointedTasks(ctx context.Context, afterSeq int64, limit int) ([]Task, error) {
	return s.queryTasks(ctx, `SELECT `+taskCols+` FROM tasks WHERE checkpoint IS NOT NULL AND seq > $1 ORDER BY seq LIMIT $2`, afterSeq, pageSize(limit))
}

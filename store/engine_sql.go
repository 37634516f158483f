package store

// engineSQL holds the statements whose text differs between the engines,
// each written whole in its engine's SQL. Every other statement is written
// once, in SQL both engines take: "$N" parameters, which both bind by
// number (TestDollarParamsBindByNumber), and nothing either lacks. What
// differs here: SQLite's two-argument max and min are greatest and least
// on PostgreSQL, and SQLite is told which index a lookup uses (INDEXED BY),
// a hint PostgreSQL's planner does not take. Row locks (lockTask,
// forUpdate) are the dialect's.
type engineSQL struct {
	// heartbeat records a live run's wall time; it only grows.
	heartbeat string
	// chargeWall charges a finished run's wall time; it only grows.
	chargeWall string
	// chargeModel charges a model call and raises the depth used.
	chargeModel string
	// interruptTasks interrupts this host's live tasks, charging each the
	// wall time since its last heartbeat, up to its limit.
	interruptTasks string
	// attemptsHead is a task's last attempt number and its running
	// attempt: the first from the primary key, the second from the small
	// partial index of running attempts.
	attemptsHead string
	// finishTaskWall is finishTaskSQL's first assignment: wall time only
	// grows.
	finishTaskWall string
}

func sqliteSQL() engineSQL {
	return engineSQL{
		heartbeat: `UPDATE tasks SET wall_ms_used = max(wall_ms_used, $1)
	WHERE id = $2 AND principal_id = $3 AND run_id = $4 AND status IN ('running', 'waiting_approval')`,
		chargeWall: `UPDATE tasks SET wall_ms_used = max(wall_ms_used, $1) WHERE id = $2`,
		chargeModel: `UPDATE tasks SET model_calls_used = model_calls_used + 1, depth_used = max(depth_used, $1)
		WHERE id = $2 AND principal_id = $3 AND run_id = $4 AND status = 'running'
			AND model_calls_used < model_calls_limit AND $1 <= depth_limit
			AND model_tokens_used + $5 <= model_tokens_limit AND output_bytes_used < output_bytes_limit
		RETURNING ` + taskCols,
		interruptTasks: `UPDATE tasks SET status = 'interrupted', reason = $1, message = '', updated_ns = $2,
			wall_ms_used = max(wall_ms_used, min(wall_ms_used + $3, wall_ms_limit))
		WHERE status IN ('running', 'waiting_approval') AND lease_host IN ($4, '') RETURNING ` + taskCols,
		attemptsHead: `SELECT coalesce((SELECT max(number) FROM attempts WHERE task_id = $1), 0),
		(SELECT number FROM attempts INDEXED BY attempts_running WHERE task_id = $1 AND status = 'running' LIMIT 1)`,
		finishTaskWall: `wall_ms_used = max(wall_ms_used, $1)`,
	}
}

func pgSQL() engineSQL {
	return engineSQL{
		heartbeat: `UPDATE tasks SET wall_ms_used = greatest(wall_ms_used, $1)
	WHERE id = $2 AND principal_id = $3 AND run_id = $4 AND status IN ('running', 'waiting_approval')`,
		chargeWall: `UPDATE tasks SET wall_ms_used = greatest(wall_ms_used, $1) WHERE id = $2`,
		chargeModel: `UPDATE tasks SET model_calls_used = model_calls_used + 1, depth_used = greatest(depth_used, $1)
		WHERE id = $2 AND principal_id = $3 AND run_id = $4 AND status = 'running'
			AND model_calls_used < model_calls_limit AND $1 <= depth_limit
			AND model_tokens_used + $5 <= model_tokens_limit AND output_bytes_used < output_bytes_limit
		RETURNING ` + taskCols,
		interruptTasks: `UPDATE tasks SET status = 'interrupted', reason = $1, message = '', updated_ns = $2,
			wall_ms_used = greatest(wall_ms_used, least(wall_ms_used + $3, wall_ms_limit))
		WHERE status IN ('running', 'waiting_approval') AND lease_host IN ($4, '') RETURNING ` + taskCols,
		attemptsHead: `SELECT coalesce((SELECT max(number) FROM attempts WHERE task_id = $1), 0),
		(SELECT number FROM attempts WHERE task_id = $1 AND status = 'running' LIMIT 1)`,
		finishTaskWall: `wall_ms_used = greatest(wall_ms_used, $1)`,
	}
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Task trees. A running task may delegate a child task (CreateChild): the
// child records its parent, its tree's root and its depth (the parent's + 1,
// computed here, never declared by the caller), and belongs to the parent's
// principal. A tree is bounded by the number of tasks delegated under its
// root (max_subagents) and by its depth (max_depth).
//
// What a child's end does to its parent, and a parent's end to its
// subtree, is SettleTrees: one transaction that reads each live tree and
// applies the rules until none applies. Pause, cancel and resume of a
// subtree are SettleTrees' rules too; a resume of a subtree is one
// transaction (ResumeTree).

// MaxTreeDepthLimit and MaxSubagentsLimit are the caps of [tasks]
// max_depth and max_subagents.
const (
	MaxTreeDepthLimit = 8
	MaxSubagentsLimit = 64
)

// taskStatusList is the tasks table's status CHECK list.
const taskStatusList = `'pending','running','waiting_approval','completed','failed','cancelled','interrupted','blocked'`

// oldTaskStatusCheck is the status CHECK of the tasks table before task
// trees, as SQLite keeps it in the table's CREATE text.
const oldTaskStatusCheck = `CHECK (status IN ('pending','running','waiting_approval','completed','failed','cancelled','interrupted'))`

// rebuildTasksStatus widens the tasks table's status CHECK to take
// blocked. SQLite cannot alter a CHECK, so the table is rebuilt as its own
// documentation says (create the new table, copy, drop, rename, re-create
// the indexes), inside the migration's transaction with foreign keys off;
// the migration's statements, which add the tree columns, run first, so
// the copy carries them and their indexes too.
func rebuildTasksStatus(ctx context.Context, tx *sql.Tx) error {
	var create string
	if err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'tasks'`).Scan(&create); err != nil {
		return fmt.Errorf("read the tasks table: %w", err)
	}
	if strings.Contains(create, `CHECK (status IN (`+taskStatusList+`))`) {
		// Already wide: a file taken back by hand to an older version
		// (tests do) keeps the wider CHECK.
		return nil
	}
	if strings.Count(create, oldTaskStatusCheck) != 1 {
		return fmt.Errorf("the tasks table's status CHECK is not the one this migration widens: %.200s", create)
	}
	head, rest, ok := strings.Cut(create, "(")
	if !ok || !strings.Contains(head, "tasks") {
		return fmt.Errorf("the tasks table's CREATE text is not recognised: %.200s", create)
	}
	create = "CREATE TABLE tasks_rebuilt (" + strings.Replace(rest, oldTaskStatusCheck, `CHECK (status IN (`+taskStatusList+`))`, 1)
	var indexes []string
	rows, err := tx.QueryContext(ctx, `SELECT sql FROM sqlite_master WHERE tbl_name = 'tasks' AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			rows.Close()
			return err
		}
		indexes = append(indexes, q)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	var cols []string
	rows, err = tx.QueryContext(ctx, `SELECT name FROM pragma_table_info('tasks') ORDER BY cid`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return err
		}
		cols = append(cols, `"`+c+`"`)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	list := strings.Join(cols, ", ")
	for _, q := range append([]string{
		create,
		`INSERT INTO tasks_rebuilt (` + list + `) SELECT ` + list + ` FROM tasks`,
		`DROP TABLE tasks`,
		`ALTER TABLE tasks_rebuilt RENAME TO tasks`,
	}, indexes...) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("rebuild the tasks table: %w", err)
		}
	}
	return nil
}

// foreignKeysHold refuses a rebuild that left a row referencing nothing.
func foreignKeysHold(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `PRAGMA foreign_key_check`)
	if err != nil {
		return err
	}
	defer rows.Close()
	if rows.Next() {
		return errors.New("the rebuild left rows whose foreign keys reference nothing")
	}
	return rows.Err()
}

// ErrTreeLimit: a delegation beyond max_subagents or max_depth, or one
// whose budgets the parent does not have; nothing was written. It is
// always a *TreeLimitError.
var ErrTreeLimit = errors.New("task tree limit")

// TreeLimitError is a delegation refused by a bound of its tree.
type TreeLimitError struct {
	Bound string // "max_subagents", "max_depth", or a budget's name
	Limit int64
	Value int64
	Root  string
}

func (e *TreeLimitError) Error() string {
	switch e.Bound {
	case "max_subagents":
		return fmt.Sprintf("the tree of %s already holds %d delegated tasks (tasks.max_subagents = %d): nothing was delegated", e.Root, e.Value, e.Limit)
	case "max_depth":
		return fmt.Sprintf("a child would be at depth %d (tasks.max_depth = %d): nothing was delegated", e.Value, e.Limit)
	}
	return fmt.Sprintf("the child's %s of %d is more than the parent has left (%d): nothing was delegated", e.Bound, e.Value, e.Limit)
}

func (e *TreeLimitError) Is(t error) bool { return t == ErrTreeLimit }

// ErrParentDown: a child's resume while its parent is interrupted (or
// otherwise not waiting for it). It is always a *ParentDownError.
var ErrParentDown = errors.New("parent task is down")

// ParentDownError refuses the resume of a child whose parent is down.
type ParentDownError struct {
	TaskID, ParentID string
	ParentStatus     Status
}

func (e *ParentDownError) Error() string {
	return fmt.Sprintf("task %s is a child of %s, which is %s: resume the parent (it resumes its interrupted children)", e.TaskID, e.ParentID, e.ParentStatus)
}

func (e *ParentDownError) Is(t error) bool { return t == ErrParentDown || t == ErrConflict }

// NewChild is a delegation: the child task, its parent, the parent's
// budgets it takes, and the tree's bounds.
type NewChild struct {
	Task NewTask // its principal must be the parent's
	// ParentID and ParentRunID name the running parent; a parent not
	// running in that run refuses (a *TransitionError).
	ParentID    string
	ParentRunID int64
	// Charge is what the parent's used counters grow by (only the Used
	// of Steps, ToolCalls and ModelCalls are read): the child's share.
	Charge       Budgets
	MaxSubagents int
	MaxDepth     int
	QueueLimit   int
}

const (
	// root_task_id <> '' lets the partial index tasks_root count it.
	qTreeSize     = `SELECT count(*) FROM tasks WHERE root_task_id = $1 AND root_task_id <> ''`
	qChargeParent = `UPDATE tasks SET steps_used = steps_used + $1, tool_calls_used = tool_calls_used + $2,
			model_calls_used = model_calls_used + $3, model_tokens_used = model_tokens_used + $4,
			output_bytes_used = output_bytes_used + $5, updated_ns = $6
		WHERE id = $7 AND steps_used + $1 <= steps_limit AND tool_calls_used + $2 <= tool_calls_limit
			AND model_calls_used + $3 <= model_calls_limit AND model_tokens_used + $4 <= model_tokens_limit
			AND output_bytes_used + $5 <= output_bytes_limit`
	qMarkChild = `UPDATE tasks SET parent_task_id = $1, root_task_id = $2, tree_depth = $3 WHERE id = $4`
)

// CreateChild stores a delegated child task, pending at the tail of the
// queue, and charges its parent, in one transaction: the parent must be
// running in c.ParentRunID; the tree must have room (c.MaxSubagents tasks
// delegated under its root over its whole life, c.MaxDepth levels below
// it); the parent must have the charge left; the queue must have room.
// Any refusal writes nothing.
func (s *Store) CreateChild(ctx context.Context, c NewChild, events ...NewEvent) (Task, error) {
	if err := checkQueueLimit(c.QueueLimit); err != nil {
		return Task{}, err
	}
	if c.MaxSubagents < 1 || c.MaxSubagents > MaxSubagentsLimit || c.MaxDepth < 1 || c.MaxDepth > MaxTreeDepthLimit {
		return Task{}, invalidf("tree bounds max_subagents %d (1..%d), max_depth %d (1..%d)", c.MaxSubagents, MaxSubagentsLimit, c.MaxDepth, MaxTreeDepthLimit)
	}
	ch := c.Charge
	if ch.Steps.Used < 0 || ch.ToolCalls.Used < 0 || ch.ModelCalls.Used < 0 || ch.ModelTokens.Used < 0 || ch.OutputBytes.Used < 0 {
		return Task{}, invalidf("a delegation's charge must not be negative")
	}
	if err := s.checkNewTask(c.Task, events); err != nil {
		return Task{}, err
	}
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		if err := tx.lockTaskRow(ctx, c.ParentID); err != nil {
			return err
		}
		p, err := scanTask(tx.QueryRowContext(ctx, qTaskByID, c.ParentID, c.Task.PrincipalID))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound(c.ParentID)
		}
		if err != nil {
			return err
		}
		if p.Status != StatusRunning || p.RunID != c.ParentRunID {
			return &TransitionError{TaskID: p.ID, Current: p.Status, RunID: p.RunID, WantRunID: c.ParentRunID}
		}
		root := cmpOr(p.RootID, p.ID)
		depth := p.TreeDepth + 1
		if err := checkTreeRoom(ctx, tx, c, p, root, depth); err != nil {
			return err
		}
		now := nanos(s.now())
		res, err := tx.exec(ctx, qChargeParent, ch.Steps.Used, ch.ToolCalls.Used, ch.ModelCalls.Used,
			ch.ModelTokens.Used, ch.OutputBytes.Used, now, p.ID)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil {
			return err
		} else if k != 1 {
			return &TreeLimitError{Bound: "budgets", Root: root}
		}
		tx.wrote(p.ID)
		if err := s.admit(ctx, tx, c.QueueLimit); err != nil {
			return err
		}
		if t, err = s.insertTask(ctx, tx, c.Task, now, events); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, qMarkChild, p.ID, root, depth, t.ID); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, qQueueMark, now, "", t.ID); err != nil {
			return err
		}
		t.ParentID, t.RootID, t.TreeDepth = p.ID, root, depth
		return nil
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

// checkTreeRoom refuses a child that would pass the tree's bounds (its
// depth, its count of tasks) or a budget the parent p has left for its
// charge; root is p's tree, depth the child's.
func checkTreeRoom(ctx context.Context, tx *txn, c NewChild, p Task, root string, depth int64) error {
	if depth > int64(c.MaxDepth) {
		return &TreeLimitError{Bound: "max_depth", Limit: int64(c.MaxDepth), Value: depth, Root: root}
	}
	var n int64
	if err := tx.QueryRowContext(ctx, qTreeSize, root).Scan(&n); err != nil {
		return err
	}
	if n >= int64(c.MaxSubagents) {
		return &TreeLimitError{Bound: "max_subagents", Limit: int64(c.MaxSubagents), Value: n, Root: root}
	}
	ch := c.Charge
	for _, b := range []struct {
		name       string
		want, left int64
	}{
		{"max_steps", ch.Steps.Used, p.Budgets.Steps.Remaining()},
		{"max_tool_calls", ch.ToolCalls.Used, p.Budgets.ToolCalls.Remaining()},
		{"max_model_calls", ch.ModelCalls.Used, p.Budgets.ModelCalls.Remaining()},
		{"max_model_tokens", ch.ModelTokens.Used, p.Budgets.ModelTokens.Remaining()},
		{"max_output_bytes", ch.OutputBytes.Used, p.Budgets.OutputBytes.Remaining()},
	} {
		if b.want > b.left {
			return &TreeLimitError{Bound: b.name, Limit: b.left, Value: b.want, Root: root}
		}
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// qLockTree names the rows of root $1's tree for a lock, on PostgreSQL;
// its test of root_task_id against the empty string lets the planner use
// tasks_root (qTreeOf).
const qLockTree = `SELECT id FROM tasks WHERE id = $1 OR (root_task_id = $1 AND root_task_id <> '') ORDER BY seq`

// qTreeOf reads the tree of root $1: the root by its id, the rest by the
// tasks_root index. One WHERE with an OR of the two would have SQLite's
// planner read every task of the principal (tasks_principal_seq), and the
// partial index serves only a query that tests root_task_id against the
// empty string itself.
const qTreeOf = `SELECT ` + taskListCols + ` FROM tasks WHERE id = $1 AND principal_id = $2
	UNION ALL SELECT ` + taskListCols + ` FROM tasks WHERE root_task_id = $1 AND root_task_id <> '' AND principal_id = $2
	ORDER BY seq`

// Tree returns every task of the tree principal's task id belongs to, its
// root first, in creation order (at most max_subagents + 1 tasks), without
// checkpoints.
func (s *Store) Tree(ctx context.Context, principal, id string) ([]Task, error) {
	t, err := s.GetTask(ctx, principal, id)
	if err != nil {
		return nil, err
	}
	return s.queryTasks(ctx, qTreeOf, cmpOr(t.RootID, t.ID), principal)
}

// Subtree is tree's tasks below id (not id itself), parents before their
// children.
func Subtree(tree []Task, id string) []Task {
	var out []Task
	frontier := []string{id}
	for len(frontier) > 0 {
		var next []string
		for _, t := range tree {
			if slices.Contains(frontier, t.ParentID) {
				out = append(out, t)
				next = append(next, t.ID)
			}
		}
		frontier = next
	}
	return out
}

// Children is tree's tasks whose parent is id, in creation order.
func Children(tree []Task, id string) []Task {
	var out []Task
	for _, t := range tree {
		if t.ParentID == id {
			out = append(out, t)
		}
	}
	return out
}

// TreeEvents gives the events of a tree change: t as it is after it.
type TreeEvents func(t Task) []NewEvent

// hostWide are the reasons a whole host's tasks are interrupted with: a
// child interrupted so took its tree down with it, and does not fail its
// parent.
func hostWide(r Reason) bool {
	return r == ReasonHostRestart || r == ReasonHostShutdown || r == ReasonHostLost || r == ReasonRunLost
}

func live(st Status) bool { return !st.Terminal() && st != StatusInterrupted }

// treeTx is one tree read inside a write transaction, changed in place.
type treeTx struct {
	s       *Store
	tx      *txn
	tree    []Task
	events  TreeEvents
	changed []Task
}

// lockTree locks (on PostgreSQL) and reads the tree of root.
func (s *Store) lockTree(ctx context.Context, tx *txn, root, principal string, events TreeEvents) (*treeTx, error) {
	if lock := s.d.forUpdate("tasks", false); lock != "" {
		if _, err := tx.exec(ctx, qLockTree+lock, root); err != nil {
			return nil, err
		}
	}
	rows, err := tx.QueryContext(ctx, qTreeOf, root, principal)
	if err != nil {
		return nil, err
	}
	var tree []Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		tree = append(tree, t)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	return &treeTx{s: s, tx: tx, tree: tree, events: events}, rows.Err()
}

// move changes tree task i from its status to to, with events, and a
// queue mark when it enters pending.
func (tt *treeTx) move(ctx context.Context, i int, to Status, reason Reason, msg string) error {
	cur := tt.tree[i]
	if !Legal(cur.Status, to) {
		return fmt.Errorf("store: tree rule %s → %s for task %s is not a legal transition", cur.Status, to, cur.ID)
	}
	next := cur
	next.Status, next.Reason, next.Message = to, reason, msg
	var evs []NewEvent
	if tt.events != nil {
		evs = tt.events(next)
	}
	if err := tt.s.checkEvents(evs); err != nil {
		return err
	}
	if len(msg) > tt.s.lim.Message {
		msg = msg[:tt.s.lim.Message]
	}
	t, stored, err := tt.s.transition(ctx, tt.tx, &transitionParams{PrincipalID: cur.PrincipalID, TaskID: cur.ID,
		From: []Status{cur.Status}, To: to, Reason: reason, Message: msg, Events: len(evs)})
	if err != nil {
		return err
	}
	if to == StatusPending {
		if _, err := tt.tx.exec(ctx, qQueueMark, nanos(tt.s.now()), "", t.ID); err != nil {
			return err
		}
	}
	if to == StatusCancelled {
		if _, err := tt.tx.ExecContext(ctx, qCancelApprovals, nanos(tt.s.now()), t.ID); err != nil {
			return err
		}
	}
	if _, err := tt.s.storeEvents(ctx, tt.tx, t.ID, t.RunID, stored, evs); err != nil {
		return err
	}
	t.Checkpoint = nil
	tt.tree[i] = t
	tt.changed = append(tt.changed, t)
	return nil
}

func (tt *treeTx) index(id string) int {
	return slices.IndexFunc(tt.tree, func(t Task) bool { return t.ID == id })
}

// treeMove is one change a tree rule makes: task i of the tree to status
// to, with reason and message.
type treeMove struct {
	i      int
	to     Status
	reason Reason
	msg    string
}

// nextMove is the first change the tree rules make to tree, if any. It
// reads only tree, so that a tree read outside a transaction can be
// found quiet without taking the writer.
func nextMove(tree []Task) (treeMove, bool) {
	index := func(id string) int { return slices.IndexFunc(tree, func(t Task) bool { return t.ID == id }) }
	for pi, p := range tree {
		kids := Children(tree, p.ID)
		if len(kids) == 0 {
			continue
		}
		switch {
		case p.Status.Terminal():
			// A parent that ended takes its live subtree with it.
			for _, c := range kids {
				if !c.Status.Terminal() {
					return treeMove{index(c.ID), StatusCancelled, ReasonParentEnded, "parent " + p.ID + " is " + string(p.Status)}, true
				}
			}
		case p.Status == StatusInterrupted:
			// A parent that is down pauses its live subtree.
			for _, c := range kids {
				if live(c.Status) {
					return treeMove{index(c.ID), StatusInterrupted, p.Reason, "parent " + p.ID + " is interrupted"}, true
				}
			}
		case p.Status == StatusBlocked:
			// Only a child that ended while its parent waited fails it: one
			// that ended before, the parent saw while it ran (its step is
			// told of its children) and went on without.
			allDone, down := true, Reason("")
			for _, c := range kids {
				switch {
				case c.Status == StatusInterrupted && hostWide(c.Reason):
					down = c.Reason
				case !c.UpdatedAt.After(p.UpdatedAt):
				case c.Status == StatusFailed || c.Status == StatusCancelled || c.Status == StatusInterrupted:
					return treeMove{pi, StatusFailed, ReasonChildFailed, fmt.Sprintf("child %s is %s (%s)", c.ID, c.Status, c.Reason)}, true
				}
				allDone = allDone && c.Status.Terminal()
			}
			if down != "" {
				return treeMove{pi, StatusInterrupted, down, "a child was interrupted with its host"}, true
			}
			if allDone {
				return treeMove{pi, StatusPending, ReasonNone, ""}, true
			}
		}
	}
	return treeMove{}, false
}

// settle applies the tree rules' first change to the tree; it reports
// whether there was one.
func (tt *treeTx) settle(ctx context.Context) (bool, error) {
	m, ok := nextMove(tt.tree)
	if !ok {
		return false, nil
	}
	return true, tt.move(ctx, m.i, m.to, m.reason, m.msg)
}

func (tt *treeTx) settleAll(ctx context.Context) error {
	// Each round changes one task and no task changes twice in the same
	// direction, so the rounds are bounded by the tree's size times its
	// statuses; the bound guards against a rule that would flip-flop.
	for range 8 * (len(tt.tree) + 1) {
		more, err := tt.settle(ctx)
		if err != nil || !more {
			return err
		}
	}
	return fmt.Errorf("store: the tree of %s did not settle", tt.tree[0].ID)
}

// qLiveTrees finds the trees settle can change: those with a child that
// has not ended (its parent may have ended or gone down) or a task blocked
// on its children. Its WHERE is the partial index tasks_tree_live's, term
// for term, so that both engines read the index: what is live in trees,
// never the history of finished tasks (TestQueryPlans).
const qLiveTrees = `SELECT DISTINCT CASE WHEN root_task_id = '' THEN id ELSE root_task_id END, principal_id FROM tasks
	WHERE status NOT IN ('completed','failed','cancelled') AND (parent_task_id <> '' OR status = 'blocked')
	LIMIT 4096`

// SettleTrees applies, in one transaction per tree a rule changes, what a
// child's end does to its parent and a parent's end to its subtree, to
// every tree (every principal's) with a child that has not ended or a
// blocked task — the only trees a rule below can change; a tree no rule
// changes is only read:
//
//   - a parent that is completed, failed or cancelled: its live children
//     are cancelled (parent_ended);
//   - a parent that is interrupted: its live children are interrupted
//     with its reason;
//   - a blocked parent with a child that failed, was cancelled, or was
//     interrupted other than with its host (host_restart, host_shutdown,
//     host_lost, run_lost) while the parent waited: the parent fails
//     (child_failed); a child that ended before the parent blocked, the
//     parent's step saw;
//   - a blocked parent with a child interrupted with its host: the parent
//     is interrupted with that reason (only an explicit resume continues
//     the tree);
//   - a blocked parent whose children have all ended: it is woken,
//     pending at the tail of the queue (beyond the queue's bound: it must
//     run).
//
// It returns the tasks it changed, as they are after it.
func (s *Store) SettleTrees(ctx context.Context, events TreeEvents) ([]Task, error) {
	type treeRef struct{ root, principal string }
	var refs []treeRef
	rows, err := s.readRows(ctx, qLiveTrees)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var r treeRef
		if err := rows.Scan(&r.root, &r.principal); err != nil {
			rows.Close()
			return nil, err
		}
		refs = append(refs, r)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	var changed []Task
	for _, r := range refs {
		// A quiet tree, most of them at most run ends, is read without
		// the writer: the writer would serialise every live tree's
		// transaction with the steps' commits. A change after this read
		// comes with its own settle (its writer's, or the queue loop's).
		tree, err := s.queryTasks(ctx, qTreeOf, r.root, r.principal)
		if err != nil {
			return changed, err
		}
		if _, ok := nextMove(tree); !ok {
			continue
		}
		var got []Task
		err = s.write(ctx, func(tx *txn) error {
			tt, err := s.lockTree(ctx, tx, r.root, r.principal, events)
			if err != nil || len(tt.tree) == 0 {
				return err
			}
			err = tt.settleAll(ctx)
			got = tt.changed
			return err
		})
		if err != nil {
			return changed, err
		}
		changed = append(changed, got...)
	}
	return changed, nil
}

// ResumeTree resumes principal's interrupted task id and every
// interrupted task below it, in one transaction: a task with children
// that have not ended becomes blocked (waiting_children), any other joins
// the tail of the queue (pending) — unless the queue then holds more than
// queueLimit (*QueueFullError, nothing written). A task whose parent is
// interrupted or has ended is a *ParentDownError; one not interrupted a
// *TransitionError.
func (s *Store) ResumeTree(ctx context.Context, principal, id string, queueLimit int, events TreeEvents) ([]Task, error) {
	if err := checkQueueLimit(queueLimit); err != nil {
		return nil, err
	}
	return s.subtreeAct(ctx, principal, id, events, func(ctx context.Context, tt *treeTx, i int) error {
		t := tt.tree[i]
		if t.Status != StatusInterrupted {
			return &TransitionError{TaskID: t.ID, Current: t.Status, To: StatusRunning}
		}
		if t.ParentID != "" {
			if p := tt.tree[tt.index(t.ParentID)]; !live(p.Status) {
				return &ParentDownError{TaskID: t.ID, ParentID: p.ID, ParentStatus: p.Status}
			}
		}
		nodes := append([]Task{t}, Subtree(tt.tree, t.ID)...)
		var queued int64
		for _, n := range nodes {
			if n.Status == StatusInterrupted && !hasLiveChild(tt.tree, n.ID) {
				queued++
			}
		}
		var n int64
		if err := tt.tx.QueryRowContext(ctx, qCountQueued).Scan(&n); err != nil {
			return err
		}
		if n+queued > int64(queueLimit) {
			return &QueueFullError{Limit: queueLimit, Queued: n}
		}
		for _, n := range nodes {
			if n.Status != StatusInterrupted {
				continue
			}
			to, reason := StatusPending, ReasonNone
			if hasLiveChild(tt.tree, n.ID) {
				to, reason = StatusBlocked, ReasonWaitingChildren
			}
			if err := tt.move(ctx, tt.index(n.ID), to, reason, ""); err != nil {
				return err
			}
		}
		return nil
	})
}

func hasLiveChild(tree []Task, id string) bool {
	return slices.ContainsFunc(Children(tree, id), func(c Task) bool { return !c.Status.Terminal() })
}

// subtreeAct runs act on principal's task id inside one transaction over
// its locked tree.
func (s *Store) subtreeAct(ctx context.Context, principal, id string, events TreeEvents, act func(ctx context.Context, tt *treeTx, i int) error) ([]Task, error) {
	t, err := s.GetTask(ctx, principal, id)
	if err != nil {
		return nil, err
	}
	var changed []Task
	err = s.write(ctx, func(tx *txn) error {
		tt, err := s.lockTree(ctx, tx, cmpOr(t.RootID, t.ID), principal, events)
		if err != nil {
			return err
		}
		i := tt.index(id)
		if i < 0 {
			return notFound(id)
		}
		if err := act(ctx, tt, i); err != nil {
			return err
		}
		changed = tt.changed
		return nil
	})
	if err != nil {
		return nil, err
	}
	return changed, nil
}

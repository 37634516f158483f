package store

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var paramRE = regexp.MustCompile(`[?$](\d*)`)

// params counts a query's parameters ("?", "?N" or "$N", not mixed here).
func params(q string) int {
	n := 0
	for _, m := range paramRE.FindAllStringSubmatch(q, -1) {
		if m[1] == "" {
			n++
		} else if i, _ := strconv.Atoi(m[1]); i > n {
			n = i
		}
	}
	return n
}

// TestQueryPlans checks that the statements the runner issues on every step,
// and the listings, are index searches: none may scan a whole table, whose
// size grows with the store's history.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	queries := append(writeQueries(sqliteSQL()), qTaskExists, qEvents, qLiveTrees, qTreeOf, qTreeSize, qTaskGrants,
		`SELECT `+taskListCols+` FROM tasks WHERE principal_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
		`SELECT `+taskListCols+` FROM tasks WHERE principal_id = $1 AND seq > $2 AND status IN ($3, $4) ORDER BY seq LIMIT $5`,
		`SELECT `+attemptCols+` FROM attempts WHERE task_id = $1 AND EXISTS (SELECT 1 FROM tasks WHERE id = $1 AND principal_id = $2) ORDER BY number`,
	)
	for _, q := range queries {
		rows, err := s.r.QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+q, make([]any, params(q))...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		t.Logf("%v", plan)
		for _, step := range plan {
			// A scan of a partial index (only running attempts, only live
			// tasks, only the live members of trees) is bounded by what is
			// live, not by history.
			// A multi-row VALUES clause is the rows being inserted.
			if strings.HasPrefix(step, "SCAN ") && step != "SCAN CONSTANT ROW" && !strings.HasSuffix(step, "-ROW VALUES CLAUSE") &&
				!strings.Contains(step, "attempts_running") && !strings.Contains(step, "tasks_live") &&
				!strings.Contains(step, "approvals_pending") && !strings.Contains(step, "effects_unsettled") &&
				!strings.Contains(step, "tasks_tree_live") {
				t.Errorf("full scan in\n%s\nplan: %v", q, plan)
			}
			// A principal's tasks or approvals alone are its whole history.
			if strings.HasSuffix(step, "tasks_principal_seq (principal_id=?)") || strings.HasSuffix(step, "approvals_principal (principal_id=?)") {
				t.Errorf("every row of the principal read in\n%s\nplan: %v", q, plan)
			}
		}
	}
}

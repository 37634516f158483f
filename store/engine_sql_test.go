package store

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// TestDollarParamsBindByNumber: the statements are written once with "$N"
// parameters, which PostgreSQL binds by number. SQLite takes "$N" as a
// named parameter and numbers such parameters by first appearance, so
// "$2 ... $1" would bind the wrong values unless the driver binds "$N" to
// the Nth argument — modernc.org/sqlite does. A parameter used twice, and
// parameters out of order, must bind alike on both engines, prepared or
// not.
func TestDollarParamsBindByNumber(t *testing.T) {
	t.Parallel()
	const q = `SELECT CAST($3 AS TEXT), CAST($1 AS TEXT), CAST($3 AS TEXT), CAST($2 AS BIGINT) + CAST($2 AS BIGINT)`
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		check := func(t *testing.T, how string, scan func(dest ...any) error) {
			t.Helper()
			var a, b, c string
			var n int64
			if err := scan(&a, &b, &c, &n); err != nil {
				t.Fatalf("%s: %v", how, err)
			}
			if got := strings.Join([]string{a, b, c}, ","); got != "third,first,third" || n != 14 {
				t.Fatalf("%s: got %s and %d, want third,first,third and 14", how, got, n)
			}
		}
		check(t, "direct", s.r.QueryRowContext(ctx, q, "first", int64(7), "third").Scan)
		st, err := s.r.PrepareContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		check(t, "prepared", st.QueryRowContext(ctx, "first", int64(7), "third").Scan)
	})
}

// TestEngineSQLIsItsEngines: every statement written per engine is set,
// and holds no text of the other's: no INDEXED BY, max or min of two
// arguments on PostgreSQL, no greatest or least on SQLite.
func TestEngineSQLIsItsEngines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		q      engineSQL
		refuse []string
	}{
		{"sqlite", sqliteSQL(), []string{"greatest(", "least(", "?"}},
		{"postgres", pgSQL(), []string{"INDEXED BY", "max(wall", "max(depth", "min(wall", "?"}},
	} {
		v := reflect.ValueOf(tc.q)
		for i := range v.NumField() {
			q := v.Field(i).String()
			if q == "" {
				t.Errorf("%s: %s is empty", tc.name, v.Type().Field(i).Name)
			}
			for _, bad := range tc.refuse {
				if strings.Contains(q, bad) {
					t.Errorf("%s statement holds %q: %s", tc.name, bad, q)
				}
			}
		}
	}
}

// TestStatementsUseDollarParams: every statement the write paths prepare,
// on either engine, is written with "$N" parameters — none with SQLite's
// "?", which PostgreSQL would refuse, since nothing rewrites them.
func TestStatementsUseDollarParams(t *testing.T) {
	t.Parallel()
	for name, q := range map[string]engineSQL{"sqlite": sqliteSQL(), "postgres": pgSQL()} {
		for _, stmt := range writeQueries(q) {
			if strings.Contains(stmt, "?") {
				t.Errorf("%s: a statement holds \"?\": %s", name, stmt)
			}
		}
	}
}

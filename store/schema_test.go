package store

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testpg"
)

// update rewrites the schema goldens from the schema the migrations build:
// go test ./store -run Schema -update. A golden that changes is a schema
// change, reviewed in the diff like any other.
var update = flag.Bool("update", false, "rewrite testdata/schema_*.golden")

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("schema differs from %s (run with -update if the change is meant):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+), in order.
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// dumpRows appends one line per row of query, its columns joined by " | ".
func dumpRows(t *testing.T, b *strings.Builder, db *sql.DB, heading, query string, args ...any) {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatalf("%s: %v", heading, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(b, "# %s\n", heading)
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		fields := make([]string, len(vals))
		for i, v := range vals {
			fields[i] = "NULL"
			if v.Valid {
				fields[i] = v.String
			}
		}
		fmt.Fprintf(b, "%s\n", strings.Join(fields, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// sqliteSchema dumps a store file's whole schema: every object's CREATE
// text, each table's columns, each index's columns, and the header fields.
func sqliteSchema(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b strings.Builder
	dumpRows(t, &b, db, "header", `SELECT (SELECT user_version FROM pragma_user_version), (SELECT application_id FROM pragma_application_id)`)
	dumpRows(t, &b, db, "objects", `SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name`)
	dumpRows(t, &b, db, "columns", `SELECT m.name, c.cid, c.name, c.type, c."notnull", c.dflt_value, c.pk, c.hidden
		FROM sqlite_schema m, pragma_table_xinfo(m.name) c WHERE m.type = 'table' ORDER BY m.name, c.cid`)
	dumpRows(t, &b, db, "indexes", `SELECT m.name, l.name, l."unique", l.origin, l.partial, i.seqno, i.name
		FROM sqlite_schema m, pragma_index_list(m.name) l, pragma_index_info(l.name) i
		WHERE m.type = 'table' ORDER BY m.name, l.name, i.seqno`)
	dumpRows(t, &b, db, "foreign keys", `SELECT m.name, f.id, f.seq, f."table", f."from", f."to", f.on_update, f.on_delete
		FROM sqlite_schema m, pragma_foreign_key_list(m.name) f WHERE m.type = 'table' ORDER BY m.name, f.id, f.seq`)
	return b.String()
}

// pgSchemaQueries dump a PostgreSQL store's schema from the catalog: every
// relation, column, constraint and index of the current schema.
var pgSchemaQueries = []struct{ heading, query string }{
	{"relations", `SELECT c.relkind, c.relname FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace ORDER BY c.relkind, c.relname`},
	{"columns", `SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
			a.attidentity, pg_get_expr(d.adbin, d.adrelid)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY c.relname, a.attname`},
	{"constraints", `SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
		FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
		WHERE c.relnamespace = current_schema()::regnamespace ORDER BY c.relname, k.conname`},
	{"indexes", `SELECT tablename, indexname, indexdef FROM pg_indexes
		WHERE schemaname = current_schema() ORDER BY tablename, indexname`},
	{"functions", `SELECT p.proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc p
		WHERE p.pronamespace = current_schema()::regnamespace ORDER BY 1, 2`},
}

// pgSchema dumps a PostgreSQL store's schema. Columns are listed by name,
// not position: a column added by a later migration and the same column
// in a database created after it are the same schema.
func pgSchema(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	dumpRows(t, &b, db, "versions", `SELECT version FROM `+pgVersionTable+` ORDER BY version`)
	for _, q := range pgSchemaQueries {
		dumpRows(t, &b, db, q.heading, q.query)
	}
	return b.String()
}

// TestSchemaSQLite pins the schema a fresh SQLite store ends with, and
// requires a file at every earlier version to migrate to exactly it.
func TestSchemaSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	s, err := Open(ctx, fresh, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	want := sqliteSchema(t, fresh)
	checkGolden(t, "schema_sqlite.golden", want)
	for k := 0; k < schemaVersion(); k++ {
		t.Run(fmt.Sprintf("from v%d", k), func(t *testing.T) {
			path, db := sqliteAtVersion(t, k)
			db.Close()
			s, err := Open(ctx, path, Options{})
			if err != nil {
				t.Fatalf("Open from v%d: %v", k, err)
			}
			s.Close()
			if got := sqliteSchema(t, path); got != want {
				t.Fatalf("migrated from v%d:\n%s", k, lineDiff(want, got))
			}
		})
	}
}

// TestSchemaPostgres pins the schema a fresh PostgreSQL store ends with,
// and requires a database at every earlier version to migrate to exactly
// it.
func TestSchemaPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testpg.DSN(t)
	openPGStore(t, dsn)
	want := pgSchema(t, openPGDB(t, dsn))
	checkGolden(t, "schema_postgres.golden", want)
	for k := 1; k < pgSchemaVersion(); k++ {
		t.Run(fmt.Sprintf("from v%d", k), func(t *testing.T) {
			dsn := testpg.DSN(t)
			db := openPGDB(t, dsn)
			if err := migratePG(ctx, db, k); err != nil {
				t.Fatal(err)
			}
			openPGStore(t, dsn)
			if got := pgSchema(t, db); got != want {
				t.Fatalf("migrated from v%d:\n%s", k, lineDiff(want, got))
			}
		})
	}
}

// TestPostgresSchemaHoldsOnlyTables opens a store in a fresh database and
// requires the schema it was given to hold the store's tables, their
// indexes and identity sequences, and nothing else: no function, type,
// view or operator of ours lands in a schema the user may share.
func TestPostgresSchemaHoldsOnlyTables(t *testing.T) {
	t.Parallel()
	dsn := testpg.DSN(t)
	openPGStore(t, dsn)
	db := openPGDB(t, dsn)
	var b strings.Builder
	dumpRows(t, &b, db, "other relations", `SELECT relkind, relname FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relkind NOT IN ('r', 'i', 'S') ORDER BY 1, 2`)
	dumpRows(t, &b, db, "functions", `SELECT proname, pg_get_function_identity_arguments(oid) FROM pg_proc
		WHERE pronamespace = current_schema()::regnamespace ORDER BY 1, 2`)
	// A table's row type and its array type come with the table.
	dumpRows(t, &b, db, "types", `SELECT typname FROM pg_type t
		WHERE typnamespace = current_schema()::regnamespace AND typrelid = 0
		AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.oid = t.typelem AND e.typrelid <> 0) ORDER BY 1`)
	dumpRows(t, &b, db, "operators", `SELECT oprname FROM pg_operator WHERE oprnamespace = current_schema()::regnamespace ORDER BY 1`)
	want := "# other relations\n# functions\n# types\n# operators\n"
	if got := b.String(); got != want {
		t.Fatalf("the store's schema holds more than its tables:\n%s", got)
	}
}

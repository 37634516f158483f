package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

// TestMigrationFiles loads both engines' embedded migrations: versions
// 1, 2, 3, ... each with statements, and the Go steps at the versions
// they complete.
func TestMigrationFiles(t *testing.T) {
	t.Parallel()
	for _, list := range [][]migration{sqliteMigrations(), pgMigrations()} {
		for i, m := range list {
			if m.version != i+1 || m.name == "" || len(m.stmts) == 0 {
				t.Fatalf("migration %d: version %d, name %q, %d statements", i, m.version, m.name, len(m.stmts))
			}
			for _, stmt := range m.stmts {
				if strings.HasSuffix(stmt, ";") || strings.HasPrefix(stmt, "--") {
					t.Errorf("v%d: statement not split clean: %q", m.version, stmt)
				}
			}
		}
	}
	if ms := sqliteMigrations(); ms[2].fill == nil || !ms[9].rebuildsTables || ms[9].fill == nil {
		t.Fatal("SQLite's v3 and v10 lost their Go steps")
	}
}

// TestLoadMigrationsRefuses checks the loader's refusals: a gap in the
// versions, a misnamed file, a statement without its ";", a Go step
// without a file.
func TestLoadMigrationsRefuses(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name  string
		files fstest.MapFS
		steps map[int]goStep
		want  string
	}{
		{"gap", fstest.MapFS{"m/0001_a.sql": file("SELECT 1;\n"), "m/0003_c.sql": file("SELECT 1;\n")}, nil, "version 3 follows version 1"},
		{"misnamed", fstest.MapFS{"m/1_a.sql": file("SELECT 1;\n")}, nil, "named NNNN_name.sql"},
		{"no name", fstest.MapFS{"m/0001.sql": file("SELECT 1;\n")}, nil, "named NNNN_name.sql"},
		{"unterminated", fstest.MapFS{"m/0001_a.sql": file("SELECT 1;\nSELECT 2\n")}, nil, "does not end"},
		{"only comments", fstest.MapFS{"m/0001_a.sql": file("-- nothing\n")}, nil, "no statement"},
		{"empty dir", fstest.MapFS{"m/README": file("")}, nil, "named NNNN_name.sql"},
		{"step without file", fstest.MapFS{"m/0001_a.sql": file("SELECT 1;\n")}, map[int]goStep{2: {}}, "version 2, which has no file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadMigrations(tt.files, "m", tt.steps)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
	ms, err := loadMigrations(fstest.MapFS{"m/0001_two_steps.sql": file("-- why\nCREATE TABLE a (\n\tx INTEGER\n);\n\nSELECT 1;  \n")}, "m", nil)
	if err != nil || len(ms) != 1 || ms[0].name != "two steps" ||
		!reflect.DeepEqual(ms[0].stmts, []string{"CREATE TABLE a (\n\tx INTEGER\n)", "SELECT 1"}) {
		t.Fatalf("loaded %+v, %v", ms, err)
	}
}

// TestUnbudgetedDefaults: the defaults SQL gives the budget columns of
// older tasks are the Go constants the host reads as "never asked for
// less".
func TestUnbudgetedDefaults(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	for col, want := range map[string]int64{"model_tokens_limit": UnbudgetedModelTokens, "output_bytes_limit": UnbudgetedOutputBytes} {
		var got int64
		if err := s.r.QueryRow(`SELECT dflt_value FROM pragma_table_info('tasks') WHERE name = $1`, col).Scan(&got); err != nil || got != want {
			t.Errorf("%s DEFAULT %d (%v), want %d", col, got, err, want)
		}
	}
}

type schemaObject struct{ Type, Name, Table, SQL string }

// schemaOf dumps a store file's schema and header fields.
func schemaOf(t *testing.T, path string) (objs []schemaObject, version, appID int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var o schemaObject
		if err := rows.Scan(&o.Type, &o.Name, &o.Table, &o.SQL); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA application_id`).Scan(&appID); err != nil {
		t.Fatal(err)
	}
	return objs, version, appID
}

// TestMigrateFromEveryVersion builds a file at every earlier schema version
// (0 = empty) with only the first k migrations, opens it, and requires the
// result to be exactly the schema of a fresh store.
func TestMigrateFromEveryVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	s, err := Open(ctx, fresh, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	want, wantVersion, wantApp := schemaOf(t, fresh)
	if wantVersion != schemaVersion() || wantApp != applicationID || len(want) == 0 {
		t.Fatalf("fresh store: version %d, application id %#x, %d objects", wantVersion, wantApp, len(want))
	}

	for k := 0; k <= schemaVersion(); k++ {
		t.Run(fmt.Sprintf("from v%d", k), func(t *testing.T) {
			path, db := sqliteAtVersion(t, k)
			db.Close()
			if _, v, _ := schemaOf(t, path); v != k {
				t.Fatalf("built file is at v%d, want v%d", v, k)
			}

			s, err := Open(ctx, path, Options{})
			if err != nil {
				t.Fatalf("Open from v%d: %v", k, err)
			}
			// The migrated store works.
			createTask(t, s, "p", "t")
			s.Close()
			got, version, app := schemaOf(t, path)
			if version != wantVersion || app != wantApp || !reflect.DeepEqual(got, want) {
				t.Fatalf("migrated from v%d: version %d, app %#x, schema\n%+v\nwant\n%+v", k, version, app, got, want)
			}
		})
	}
}

// TestMigrateIsIdempotent re-applies every migration to a current file:
// each sees its version already recorded and does nothing.
func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	if err := migrate(context.Background(), s.w, schemaVersion()); err != nil {
		t.Fatal(err)
	}
}

// sqliteAtVersion builds a SQLite store file at schema version v (0: an
// empty file) and returns its path and a one-connection handle on it, as
// an older binary would have left it.
func sqliteAtVersion(t *testing.T, v int) (string, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "taskhost.db")
	opts, _ := Options{}.normalize()
	db, err := sql.Open("sqlite", dsn(path, opts, "_txlock=immediate"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil { // creates the (empty) file
		t.Fatal(err)
	}
	if err := migrate(ctx, db, v); err != nil {
		t.Fatalf("migrate to v%d: %v", v, err)
	}
	return path, db
}

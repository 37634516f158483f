package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
)

func TestMigrationList(t *testing.T) {
	for i, m := range migrations {
		if m.version != i+1 {
			t.Fatalf("migration %d has version %d: versions must be 1, 2, 3, ... in order", i, m.version)
		}
		if m.name == "" || len(m.stmts) == 0 {
			t.Fatalf("migration %d is empty or unnamed", m.version)
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

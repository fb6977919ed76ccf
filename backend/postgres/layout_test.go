package postgres_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestStoreRefusesTablesOfAnotherLayoutVersion: over tables of a newer or an older layout
// version, or of one without a version, New refuses — with setup and WithoutSetup alike — with
// an error that wraps ErrLayoutVersion and names the version found and LayoutVersion, and
// changes nothing: no table, column, row or function is made, altered or removed. SchemaSQL's
// output, run over them, fails and changes nothing either.
func TestStoreRefusesTablesOfAnotherLayoutVersion(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	numbered := func(v int) string {
		return fmt.Sprintf(`CREATE TABLE %%[1]s.leasehold_schema (layout integer NOT NULL, swept bigint NOT NULL DEFAULT 0);
			INSERT INTO %%[1]s.leasehold_schema (layout) VALUES (%d);`, v)
	}
	for _, c := range []struct {
		name, ddl, found string
	}{
		{"newer", numbered(postgres.LayoutVersion + 1), fmt.Sprintf("layout version %d;", postgres.LayoutVersion+1)},
		{"older", numbered(postgres.LayoutVersion - 1), fmt.Sprintf("layout version %d;", postgres.LayoutVersion-1)},
		{"unnumbered", `CREATE TABLE %[1]s.leasehold_schema (version text NOT NULL);
			INSERT INTO %[1]s.leasehold_schema VALUES ('4f1c');`, "layout without a version number"},
		{"empty", `CREATE TABLE %[1]s.leasehold_schema (layout integer NOT NULL);`, "layout without a version number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			schema, q := newSchema(t, pool, "layout_"+c.name)
			// Their tables: the layout's table, and a keys table of another shape with a row.
			theirs := fmt.Sprintf(c.ddl+` CREATE TABLE %[1]s.leasehold_keys (other text); INSERT INTO %[1]s.leasehold_keys VALUES ('theirs');`, q)
			if _, err := pool.Exec(ctx, theirs); err != nil {
				t.Fatal(err)
			}
			before := layoutState(t, pool, schema, q)
			want := fmt.Sprintf("this Store reads layout version %d only", postgres.LayoutVersion)
			for _, opts := range [][]postgres.Option{{postgres.WithSchema(schema)}, {postgres.WithSchema(schema), postgres.WithoutSetup()}} {
				s, err := postgres.New(ctx, pool, opts...)
				if err == nil {
					s.Close()
					t.Fatalf("New over tables of layout %s: no error", c.name)
				}
				if !errors.Is(err, postgres.ErrLayoutVersion) || !strings.Contains(err.Error(), c.found) || !strings.Contains(err.Error(), want) {
					t.Errorf("New over tables of layout %s: %v; want ErrLayoutVersion naming %q and %q", c.name, err, c.found, want)
				}
			}
			ddl, err := postgres.SchemaSQL(postgres.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, ddl); err == nil {
				t.Errorf("SchemaSQL's output over tables of layout %s: no error", c.name)
			}
			if after := layoutState(t, pool, schema, q); after != before {
				t.Errorf("the schema changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// layoutState describes what schema (quoted q) holds: each table's columns, the functions'
// count, and the rows of the layout and keys tables.
func layoutState(t *testing.T, pool *pgxpool.Pool, schema, q string) string {
	t.Helper()
	var tables string
	var functions int
	err := pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT string_agg(c.relname || '(' || (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
			FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) || ')', ' ' ORDER BY c.relname)
			FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)), ''),
		(SELECT count(*) FROM pg_proc WHERE pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1))`, schema).Scan(&tables, &functions)
	if err != nil {
		t.Fatal(err)
	}
	var rows string
	if err := pool.QueryRow(context.Background(), `SELECT coalesce((SELECT string_agg(x::text, ' ') FROM `+q+`.leasehold_schema x), '')
		|| ' ' || coalesce((SELECT string_agg(x::text, ' ') FROM `+q+`.leasehold_keys x), '')`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("tables %s; %d functions; rows %s", tables, functions, rows)
}

// TestLayoutVersionPinsTheSchemaSQL: the SQL that makes the tables and functions is the one
// pinned to LayoutVersion. A Store reads nothing but the version of the tables it finds, so
// SQL changed under an unchanged version would run on tables and functions of the old SQL:
// every change of the SQL takes a new LayoutVersion, pinned here with the new SQL's sum.
func TestLayoutVersionPinsTheSchemaSQL(t *testing.T) {
	t.Parallel()
	pinned := map[int]string{
		1: "d13959d042b7becaa8c20b5792b394202fde0fd402cf20e17077a4318b01c335",
	}
	ddl, err := postgres.SchemaSQL()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(ddl))
	if got, want := hex.EncodeToString(sum[:]), pinned[postgres.LayoutVersion]; got != want {
		t.Errorf("the SQL of layout version %d has sum %s, pinned %q: a change of the SQL takes a new LayoutVersion, pinned here", postgres.LayoutVersion, got, want)
	}
}

// newSchema makes a schema of its own for t, named base and a random suffix, dropped when t ends,
// and returns its name and the name quoted for SQL.
func newSchema(t *testing.T, pool *pgxpool.Pool, base string) (schema, quoted string) {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	schema = base + "_" + hex.EncodeToString(b[:])
	quoted = pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+quoted); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+quoted+" CASCADE") })
	return schema, quoted
}

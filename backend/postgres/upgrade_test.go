package postgres_test

import (
	"context"
	_ "embed"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
)

// schemaBeforeForgetting is the schema file of the release that kept every key's row forever.
//
//go:embed testdata/schema-ff3749d.sql
var schemaBeforeForgetting string

// schemaBeforeLockDelay is the schema file of the release before the lock delay, whose acquire
// takes no delay.
//
//go:embed testdata/schema-6d38f7d.sql
var schemaBeforeLockDelay string

// newSchema makes a schema of its own for t, dropped when t ends, and returns its name and the
// name quoted for SQL.
func newSchema(t *testing.T, pool *pgxpool.Pool) (schema, quoted string) {
	t.Helper()
	schema = strings.ToLower(strings.ReplaceAll(uniqueKey(t), "-", "_"))
	quoted = pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+quoted); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+quoted+" CASCADE") })
	return schema, quoted
}

// putEarlierSchema makes, or puts back, in schema the tables and functions of the release that
// kept keys' rows forever.
func putEarlierSchema(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), postgres.SchemaSQLFrom(schemaBeforeForgetting, schema)); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaOfAnEarlierVersionIsUpgraded: New over tables and functions made by the release that
// kept keys' rows forever upgrades them in place: the rows that release left (a released key, a
// place in a line) are kept and work with the new functions, the limit rule applies to the old
// place, and the sweep removes the released key's row the old release left.
func TestSchemaOfAnEarlierVersionIsUpgraded(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema, q := newSchema(t, pool)
	putEarlierSchema(t, pool, schema)
	// The earlier release's functions leave a released key's row, and a place in a line.
	old := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	acquire := "SELECT " + q + ".leasehold_acquire($1::bytea, $2::bytea, 1, 1, 60000000, $3, ''::bytea, 0, 0, NULL, NULL, NULL, NULL)"
	old(acquire, []byte("released"), []byte("h"), 0)
	old("SELECT "+q+".leasehold_release($1::bytea, $2::bytea, 0)", []byte("released"), []byte("h"))
	old(acquire, []byte("held"), []byte("h"), 0)
	old(acquire, []byte("held"), []byte("w"), 600000000)
	count := func(table string) (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+q+".leasehold_"+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if k, w := count("keys"), count("waiters"); k != 2 || w != 1 {
		t.Fatalf("the earlier release left %d keys' rows and %d places; want 2 and 1", k, w)
	}

	s := newStore(t, url, postgres.WithSchema(schema))
	if _, err := s.Acquire(ctx, core.AcquireRequest{Key: "held", Holder: "x", Permits: 1, Limit: 2, TTL: time.Minute}); !isMismatch(err, 1, 2) {
		t.Errorf("another limit on the key held under the earlier release: %v; want a limit mismatch", err)
	}
	snap, err := s.Inspect(ctx, "held")
	if err != nil || len(snap.Leases) != 1 || len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "w" {
		t.Fatalf("Inspect of the key held under the earlier release: %+v, %v", snap, err)
	}
	sweep(t, s)
	if k, w := count("keys"), count("waiters"); k != 1 || w != 1 {
		t.Errorf("after a sweep: %d keys' rows and %d places; want 1 and 1 (the released key's row gone, the held key's kept)", k, w)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "held", Holder: "h"}); err != nil || !ok {
		t.Fatalf("Release of the earlier release's lease: %v, %v", ok, err)
	}
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: "held", Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("the earlier release's waiter, granted by the release: %+v, %v", res, err)
	}
}

// isMismatch reports whether err is a *core.LimitMismatchError naming held and requested.
func isMismatch(err error, held, requested int) bool {
	lm, ok := err.(*core.LimitMismatchError)
	return ok && lm.Held == held && lm.Requested == requested
}

// TestNoSweepUnderAnEarlierVersionsFunctions: while a Store of the earlier release has put its
// functions back (it started last, in a rolling deploy), a Store of this one does not sweep:
// those functions make a missing key's row only once and must not see it deleted under them.
func TestNoSweepUnderAnEarlierVersionsFunctions(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema, q := newSchema(t, pool)
	s := newStore(t, url, postgres.WithSchema(schema))
	putEarlierSchema(t, pool, schema)
	if _, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "h"}); err != nil {
		t.Fatal(err)
	}
	sweep(t, s)
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+q+".leasehold_keys").Scan(&n); err != nil || n != 1 {
		t.Errorf("keys' rows after a sweep under the earlier release's functions: %d, %v; want the released key's, kept", n, err)
	}
}

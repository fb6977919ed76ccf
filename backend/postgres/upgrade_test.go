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

// putEarlierSchema makes, or puts back, in schema the tables and functions of the schema file
// src, an earlier release's, as a Store of that release does when it starts.
func putEarlierSchema(t *testing.T, pool *pgxpool.Pool, src, schema string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), postgres.SchemaSQLFrom(src, schema)); err != nil {
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
	putEarlierSchema(t, pool, schemaBeforeForgetting, schema)
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
	putEarlierSchema(t, pool, schemaBeforeForgetting, schema)
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

// TestSchemaBeforeTheLockDelayIsUpgraded: New over the tables and functions of the release before
// the lock delay upgrades them in place: the lease and the place in a line that release made are
// kept, without a delay, and work with the new functions (the release grants the old place); a
// lease granted with a delay then expires delayed.
func TestSchemaBeforeTheLockDelayIsUpgraded(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema, q := newSchema(t, pool)
	putEarlierSchema(t, pool, schemaBeforeLockDelay, schema)
	old := earlierAcquire(t, pool, q)
	if granted, _ := old("held", "h", 0); !granted {
		t.Fatal("the earlier release's acquire on a free key: refused")
	}
	if granted, _ := old("held", "w", 600000000); granted {
		t.Fatal("the earlier release's acquire on a held key: granted")
	}

	s := newStore(t, url, postgres.WithSchema(schema))
	snap, err := s.Inspect(ctx, "held")
	if err != nil || len(snap.Leases) != 1 || len(snap.Waiters) != 1 || len(snap.Delayed) != 0 {
		t.Fatalf("Inspect of the key held under the earlier release: %+v, %v; want its lease and place", snap, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "held", Holder: "h"}); err != nil || !ok {
		t.Fatalf("Release of the earlier release's lease: %v, %v", ok, err)
	}
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: "held", Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("the earlier release's waiter, granted by the release: %+v, %v", res, err)
	}
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: "delayed", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, LockDelay: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("Acquire with a delay: %+v, %v", res, err)
	}
	expireInSchema(t, pool, q, "delayed")
	if snap, err := s.Inspect(ctx, "delayed"); err != nil || len(snap.Delayed) != 1 || !delayLeft(snap.Delayed[0].Left) {
		t.Errorf("Inspect of the lease expired with a delay on the upgraded schema: %+v, %v; want it delayed", snap, err)
	}
}

// TestStoreBeforeTheLockDelayOnAnUpgradedSchema: a Store of the release before the lock delay
// keeps working on the upgraded schema — its acquire, as it calls it, grants without a delay and
// keeps out of permits a delay closes, and its release releases — and when it starts again and
// puts its own functions back, a Store of this release still works (the delays may go unheeded
// then), and the next one that starts upgrades the functions again.
func TestStoreBeforeTheLockDelayOnAnUpgradedSchema(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema, q := newSchema(t, pool)
	putEarlierSchema(t, pool, schemaBeforeLockDelay, schema)
	s := newStore(t, url, postgres.WithSchema(schema))
	old := earlierAcquire(t, pool, q)
	oldRelease := func(key, holder string) (ok bool) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT "+q+".leasehold_release($1::bytea, $2::bytea, 0)", []byte(key), []byte(holder)).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	if granted, _ := old("free", "o", 0); !granted {
		t.Error("the earlier release's acquire on a free key: refused")
	}
	expireInSchema(t, pool, q, "free")
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: "free", Holder: "n", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Errorf("Acquire after the earlier release's lease expired: %+v, %v; want granted (it has no delay)", res, err)
	}
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: "delayed", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, LockDelay: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("Acquire with a delay: %+v, %v", res, err)
	}
	expireInSchema(t, pool, q, "delayed")
	if granted, retry := old("delayed", "o", 0); granted || !delayLeft(time.Duration(retry)*time.Microsecond) {
		t.Errorf("the earlier release's acquire in a delay: granted %v, retry %d µs; want refused until it ends", granted, retry)
	}
	if granted, _ := old("other", "o", 0); !granted || !oldRelease("other", "o") {
		t.Error("the earlier release's acquire and release of a free key failed")
	}

	// The earlier release's Store starts again, and puts its functions back.
	putEarlierSchema(t, pool, schemaBeforeLockDelay, schema)
	for _, holder := range []string{"x", "y"} {
		req := core.AcquireRequest{Key: "again", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, LockDelay: time.Minute}
		res, err := s.Acquire(ctx, req)
		if err != nil || !res.Granted {
			t.Fatalf("Acquire(%s) under the earlier release's functions: %+v, %v", holder, res, err)
		}
		if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "again", Holder: holder, Fence: res.Fence}); err != nil || !ok {
			t.Fatalf("Release(%s) under the earlier release's functions: %v, %v", holder, ok, err)
		}
	}
	if _, err := s.Inspect(ctx, "delayed"); err != nil {
		t.Errorf("Inspect under the earlier release's functions: %v", err)
	}

	// A Store of this release starts: the delays hold again.
	s2 := newStore(t, url, postgres.WithSchema(schema))
	if res, err := s2.Acquire(ctx, core.AcquireRequest{Key: "delayed", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || res.Granted {
		t.Errorf("Acquire in the delay once the functions are upgraded again: %+v, %v; want refused", res, err)
	}
}

// earlierAcquire returns a function that calls the acquire of the schema quoted q as a Store of
// the release before the lock delay does, for 1 permit of 1 and a minute, and reports whether
// it granted and, if not, its retry in microseconds.
func earlierAcquire(t *testing.T, pool *pgxpool.Pool, q string) func(key, holder string, wait int64) (bool, int64) {
	sql := "SELECT granted, retry FROM " + q + ".leasehold_acquire($1::bytea, $2::bytea, 1, 1, 60000000, $3::bigint, ''::bytea, 0, 0, NULL, NULL, NULL, NULL)"
	return func(key, holder string, wait int64) (granted bool, retry int64) {
		t.Helper()
		if err := pool.QueryRow(context.Background(), sql, []byte(key), []byte(holder), wait).Scan(&granted, &retry); err != nil {
			t.Fatal(err)
		}
		return granted, retry
	}
}

// expireInSchema makes the leases on key in the schema quoted q expire a second ago.
func expireInSchema(t *testing.T, pool *pgxpool.Pool, q, key string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "UPDATE "+q+`.leasehold_leases
		SET expires = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 1000000 WHERE kh = sha256($1)`, []byte(key)); err != nil {
		t.Fatal(err)
	}
}

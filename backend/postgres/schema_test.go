package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestSetupsStartingTogetherTakeTurns: setups of one schema and prefix that start at once each
// succeed at their first attempt. PostgreSQL's CREATE TABLE IF NOT EXISTS is not atomic against
// a concurrent creator: when two setups both found no version table, the later one failed with
// 23505, 42P07 or 42710 depending on when the first committed, and setup retried a list of
// those codes (TestSetupOptions failed so, 'relation "fresh_schema" already exists', before
// 42P07 was on the list). Setups now take turns on a lock of their schema and prefix first.
func TestSetupsStartingTogetherTakeTurns(t *testing.T) {
	testenv.SkipShort(t, "Stores race their DDL on fresh prefixes")
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema := strings.ToLower(strings.ReplaceAll(uniqueKey(t), "-", "_"))
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	const setups = 5
	for round := range 4 {
		prefix := fmt.Sprintf("turns%d_", round)
		errs := make(chan error, setups)
		for range setups {
			go func() { errs <- postgres.SetupOnce(ctx, pool, schema, prefix) }()
		}
		for range setups {
			if err := <-errs; err != nil {
				t.Errorf("round %d: a setup beside %d others failed its one attempt: %v", round, setups-1, err)
			}
		}
	}
}

// TestSetupOptions: a Store in a schema of its own with a prefix of its own shares nothing with
// the default one; WithoutSetup refuses tables that are not there, naming SchemaSQL, and takes
// them once SchemaSQL's output has run; Stores starting together on a new prefix all start.
func TestSetupOptions(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema := "s" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	opts := []postgres.Option{postgres.WithSchema(schema), postgres.WithTablePrefix("locks_")}
	if _, err := postgres.New(ctx, pool, append(opts, postgres.WithoutSetup())...); err == nil || !strings.Contains(err.Error(), "SchemaSQL") {
		t.Errorf("WithoutSetup on an empty schema: %v, want an error naming SchemaSQL", err)
	}
	ddl, err := postgres.SchemaSQL(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatalf("SchemaSQL's output: %v", err)
	}
	own, err := postgres.New(ctx, pool, append(opts, postgres.WithoutSetup())...)
	if err != nil {
		t.Fatalf("WithoutSetup after SchemaSQL: %v", err)
	}
	defer own.Close()
	def := newStore(t, url)
	req := core.AcquireRequest{Key: uniqueKey(t), Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	for _, s := range []*postgres.Store{own, def} {
		if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
			t.Fatalf("Acquire: %+v, %v: the stores share a key", res, err)
		}
	}
	// Stores starting together on a prefix nobody has set up yet.
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			s, err := postgres.New(ctx, pool, postgres.WithSchema(schema), postgres.WithTablePrefix("fresh_"))
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Errorf("a Store starting beside others: %v", err)
		}
	}
}

// TestSetupRetriesWhenConcurrentDDLCollides: the errors two CREATE TABLE IF NOT EXISTS of one
// table, racing in two transactions, end with are retried: the other Store made the table.
func TestSetupRetriesWhenConcurrentDDLCollides(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"23505", "42P07", "42710"} {
		if !postgres.Retryable(&pgconn.PgError{Code: code}) {
			t.Errorf("setup gives up on SQLSTATE %s, which a Store starting beside another meets", code)
		}
	}
}

// TestStoresStartingTogetherOnFreshPrefixes: Stores that start at once on a prefix nobody has set
// up all start, though their CREATE TABLE IF NOT EXISTS statements run into each other.
func TestStoresStartingTogetherOnFreshPrefixes(t *testing.T) {
	testenv.SkipShort(t, "seconds of DDL on fresh prefixes")
	t.Parallel() // in a schema of its own
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema := "s" + strings.ToLower(t.Name())
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	for round := range 6 {
		errs := make(chan error, 6)
		for range 6 {
			go func() {
				s, err := postgres.New(ctx, pool, postgres.WithSchema(schema), postgres.WithTablePrefix(fmt.Sprintf("fresh%d_", round)))
				if err == nil {
					s.Close()
				}
				errs <- err
			}()
		}
		for range 6 {
			if err := <-errs; err != nil {
				t.Errorf("round %d: a Store starting beside others: %v", round, err)
			}
		}
	}
}

// TestSchemaNamesOfAnyCharacter: a schema's name is quoted wherever it is used, so a name with
// quotes, spaces, a comment's dashes or a line break (all valid in a quoted identifier) makes a
// working Store, and its DDL runs nothing but the DDL.
func TestSchemaNamesOfAnyCharacter(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	for i, name := range []string{`q"uote`, "it's", "two words", "line\nbreak", "-- dash\r\nSELECT 1/0; --"} {
		schema := fmt.Sprintf("%s_%d_%s", strings.ToLower(t.Name()), i, name)
		q := pgx.Identifier{schema}.Sanitize()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+q+" CASCADE; CREATE SCHEMA "+q); err != nil {
			t.Fatal(err)
		}
		s := newStoreOrError(t, url, postgres.WithSchema(schema))
		if s == nil {
			t.Errorf("schema %q: New failed", schema)
			continue
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			t.Errorf("schema %q: Acquire: %+v, %v", schema, res, err)
		}
	}
}

// newStoreOrError is newStore, reporting New's error with t.Error and returning nil.
func newStoreOrError(t *testing.T, url string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	pool := newPool(t, url)
	s, err := postgres.New(context.Background(), pool, opts...)
	if err != nil {
		t.Log(err)
		return nil
	}
	t.Cleanup(func() { s.Close() })
	return s
}

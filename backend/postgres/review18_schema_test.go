package postgres_test

// An adversarial review of the PostgreSQL driver (review18): each test turns a suspicion into a check.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
)

// TestSchemaNamesOfAnyCharacter: a schema's name is quoted wherever it is used, so a name with
// quotes, spaces, a comment's dashes or a line break (all valid in a quoted identifier) makes a
// working Store, and its DDL runs nothing but the DDL.
func TestSchemaNamesOfAnyCharacter(t *testing.T) {
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
	s, err := postgres.New(pool, opts...)
	if err != nil {
		t.Log(err)
		return nil
	}
	t.Cleanup(func() { s.Close() })
	return s
}

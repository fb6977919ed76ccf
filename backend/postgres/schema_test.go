package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/postgres"
)

// TestSetupsStartingTogetherTakeTurns: setups of one schema and prefix that start at once each
// succeed at their first attempt. PostgreSQL's CREATE TABLE IF NOT EXISTS is not atomic against
// a concurrent creator: when two setups both found no version table, the later one failed with
// 23505, 42P07 or 42710 depending on when the first committed, and setup retried a list of
// those codes (TestSetupOptions failed so, 'relation "fresh_schema" already exists', before
// 42P07 was on the list). Setups now take turns on a lock of their schema and prefix first.
func TestSetupsStartingTogetherTakeTurns(t *testing.T) {
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

package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/primitives"
)

// TestRowsLeftByPerEntityKeys measures the rows left in each table after 10 000 keys are each
// acquired and released once through a Mutex, in a schema of its own. It runs only with
// LEASEHOLD_MEASURE_ROWS=1:
//
//	LEASEHOLD_MEASURE_ROWS=1 go test -run '^TestRowsLeftByPerEntityKeys$' -v ./backend/postgres/
func TestRowsLeftByPerEntityKeys(t *testing.T) {
	if os.Getenv("LEASEHOLD_MEASURE_ROWS") != "1" {
		t.Skip("a measurement: set LEASEHOLD_MEASURE_ROWS=1")
	}
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema := strings.ToLower(strings.ReplaceAll(uniqueKey(t), "-", "_"))
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	s := storeOn(t, poolConfig(t, url, func(c *pgxpool.Config) { c.MaxConns = 8 }), postgres.WithSchema(schema))
	const n = 10000
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				m, err := primitives.NewMutex(s, fmt.Sprintf("invoice:%d", i))
				if err != nil {
					t.Error(err)
					return
				}
				l, err := m.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d keys acquired and released once in %v", n, time.Since(start).Round(time.Millisecond))
	for _, table := range []string{"keys", "leases", "waiters", "left", "fences"} {
		var rows int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".leasehold_"+table).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		t.Logf("leasehold_%s: %d rows", table, rows)
	}
}

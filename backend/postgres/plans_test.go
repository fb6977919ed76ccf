package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestOperationsPlanIndexScansOnly: every function a Store calls runs with sequential and bitmap
// scans off. Without that, PL/pgSQL caches per session the plans it made while the tables were
// small (new, or just vacuumed): a sequential scan reads every lease of every key on each call,
// and a bitmap scan reads every dead row of the key's churned leases (it never marks them dead
// in the index, as an index scan does), until autovacuum comes — on new tables, a pair of
// acquire and release for new holders went from 0.4 ms to 1 ms within 9 000 pairs
// (BenchmarkStorePairNewHolders on a new database).
func TestOperationsPlanIndexScansOnly(t *testing.T) {
	t.Parallel()
	newStore(t, serverURL(t)) // makes the functions
	admin := newPool(t, serverURL(t))
	rows, err := admin.Query(context.Background(), `SELECT proname, coalesce(array_to_string(proconfig, ','), '')
		FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proname = ANY($1)`,
		[]string{"leasehold_acquire", "leasehold_extend", "leasehold_release", "leasehold_leave", "leasehold_watch",
			"leasehold_inspect", "leasehold_accept_fence"})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var name, config string
		if err := rows.Scan(&name, &config); err != nil {
			t.Fatal(err)
		}
		seen++
		if !strings.Contains(config, "enable_seqscan=off") || !strings.Contains(config, "enable_bitmapscan=off") {
			t.Errorf("%s runs with settings %q: want enable_seqscan=off and enable_bitmapscan=off", name, config)
		}
	}
	if seen != 7 {
		t.Errorf("found %d of the Store's 7 functions", seen)
	}
}

// TestOperationsNeverScanWholeTables: on tables new and empty (a prefix of its own), where
// PostgreSQL's planner finds a sequential scan cheapest and PL/pgSQL keeps that plan for the
// session, a churn of leases, a line and Inspect read the tables only through their indexes
// (pg_stat_user_tables counts no sequential scan of them). A cached plan that scans would read
// every lease of every key, and every dead row left until autovacuum, on each call.
func TestOperationsNeverScanWholeTables(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("scan%d_", time.Now().UnixNano()%1e9)
	admin := newPool(t, url)
	scans := func() (seq, idx int64) {
		admin.QueryRow(ctx, `SELECT coalesce(sum(seq_scan), 0), coalesce(sum(idx_scan), 0) FROM pg_stat_user_tables
			WHERE relname IN ($1, $2, $3)`, prefix+"keys", prefix+"leases", prefix+"waiters").Scan(&seq, &idx)
		return seq, idx
	}
	// Building the tables' four indexes reads each table once: those scans come first.
	create, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := postgres.New(ctx, create, postgres.WithTablePrefix(prefix)); err != nil {
		t.Fatal(err)
	} else {
		s.Close()
	}
	create.Close()
	poll.Until(t, "the index builds' scans to be reported", func() bool { seq, _ := scans(); return seq >= 4 })
	built, _ := scans()

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(ctx, pool, postgres.WithTablePrefix(prefix))
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	key := uniqueKey(t)
	for i := range 100 {
		holder := fmt.Sprintf("h%d", i)
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			t.Fatal(res, err)
		}
		if i%10 == 0 {
			w := core.AcquireRequest{Key: key, Holder: "w" + holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			if _, err := s.Acquire(ctx, w); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: holder, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Inspect(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder, Fence: res.Fence}); err != nil {
			t.Fatal(err)
		}
		// The line granted the waiter: it releases too.
		s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "w" + holder})
	}
	s.Close()
	pool.Close() // the backends' counters reach pg_stat_user_tables as they exit
	poll.Until(t, "the Store's backends to report their scans", func() bool { _, idx := scans(); return idx >= 300 })
	if seq, idx := scans(); seq != built {
		t.Errorf("%d sequential scans of the keys, leases and waiters tables (and %d index scans), want none", seq-built, idx)
	}
}

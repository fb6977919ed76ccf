package postgres_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// write runs, in one transaction, AcceptFence(resource, fence) and then an insert of the fence
// into the test's own table, and commits both or neither.
func write(ctx context.Context, s *postgres.Store, pool *pgxpool.Pool, resource string, fence uint64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := s.AcceptFence(ctx, tx, resource, fence); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO fenced_writes (resource, fence) VALUES ($1, $2)", resource, int64(fence))
		return err
	})
}

// writes returns the fences of the writes to resource that committed, in order.
func writes(t *testing.T, pool *pgxpool.Pool, resource string) []int64 {
	t.Helper()
	rows, _ := pool.Query(context.Background(), "SELECT fence FROM fenced_writes WHERE resource = $1 ORDER BY id", resource)
	fences, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return fences
}

// fencePool returns a Store and a pool on the shared server, whose table fenced_writes it makes
// when there is none. Tests making it at once take turns on a lock: CREATE TABLE IF NOT EXISTS
// is not atomic against a concurrent creator.
func fencePool(t *testing.T) (*postgres.Store, *pgxpool.Pool) {
	url := serverURL(t)
	s := newStore(t, url)
	pool := newPool(t, url)
	if err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `SELECT pg_advisory_xact_lock(hashtext('fenced_writes'));
			CREATE TABLE IF NOT EXISTS fenced_writes (id bigserial PRIMARY KEY, resource text NOT NULL, fence bigint NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s, pool
}

// blockedBy returns how many statements wait for a lock that tx holds.
func blockedBy(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx) func() int {
	t.Helper()
	ctx := context.Background()
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1::integer = ANY (pg_blocking_pids(pid))", pid).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
}

func TestAcceptFenceRefusesStaleWritesWithTheirTransaction(t *testing.T) {
	t.Parallel()
	s, pool := fencePool(t)
	ctx, res := context.Background(), uniqueKey(t)
	for _, step := range []struct {
		fence uint64
		stale bool
	}{{5, false}, {3, true}, {5, false}, {9, false}, {8, true}, {10, false}} {
		err := write(ctx, s, pool, res, step.fence)
		if got := errors.Is(err, postgres.ErrStaleFence); got != step.stale {
			t.Fatalf("write with fence %d: %v, want stale %v", step.fence, err, step.stale)
		}
		if step.stale && !errors.Is(err, core.ErrLost) {
			t.Errorf("a stale fence's error %v does not wrap core.ErrLost", err)
		}
		if step.stale && !errors.Is(err, core.ErrStaleFence) {
			t.Errorf("a stale fence's error %v does not wrap core.ErrStaleFence, the one sentinel of every store", err)
		}
	}
	if got, want := writes(t, pool, res), []int64{5, 5, 9, 10}; !slices.Equal(got, want) {
		t.Errorf("committed writes %v, want %v: a stale write landed or a fresh one was lost", got, want)
	}
}

func TestAcceptFenceRolledBackIsNotRecorded(t *testing.T) {
	t.Parallel()
	s, pool := fencePool(t)
	ctx, res := context.Background(), uniqueKey(t)
	errRollback := errors.New("the guarded write failed")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := s.AcceptFence(ctx, tx, res, 7); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	if err := write(ctx, s, pool, res, 6); err != nil {
		t.Errorf("fence 6 after fence 7 rolled back: %v, want accepted (7 was never recorded)", err)
	}
}

// TestAcceptFenceSerializesWriters: a newer holder's transaction waits on the older one's check;
// once the older commits a higher fence, the waiting one is refused.
func TestAcceptFenceSerializesWriters(t *testing.T) {
	t.Parallel()
	s, pool := fencePool(t)
	ctx, res := context.Background(), uniqueKey(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := s.AcceptFence(ctx, tx, res, 20); err != nil {
		t.Fatal(err)
	}
	blocked := blockedBy(t, pool, tx)
	done := make(chan error, 1)
	go func() { done <- write(ctx, s, pool, res, 19) }()
	poll.Until(t, "the second writer to wait on the first one's lock", func() bool { return blocked() > 0 })
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, postgres.ErrStaleFence) {
		t.Errorf("the waiting writer with fence 19 after 20 committed: %v, want ErrStaleFence", err)
	}
}

func TestAcceptFenceArguments(t *testing.T) {
	t.Parallel()
	s, pool := fencePool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, c := range []struct {
		tx    pgx.Tx
		fence uint64
	}{{nil, 1}, {tx, 0}, {tx, 1 << 63}} {
		if err := s.AcceptFence(ctx, c.tx, "r", c.fence); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("AcceptFence(tx %v, fence %d): %v, want ErrInvalid", c.tx != nil, c.fence, err)
		}
	}
}

// TestAcceptFenceOnANewResourceConcurrently: two transactions check fences on a resource never
// seen before; the second waits on the first's uncommitted row. A lower fence is refused once the
// first commits, an equal one passes, and after the first rolls back the second is accepted.
func TestAcceptFenceOnANewResourceConcurrently(t *testing.T) {
	t.Parallel()
	s, pool := fencePool(t)
	ctx := context.Background()
	for _, c := range []struct {
		first, second uint64
		commit        bool
		stale         bool
	}{{5, 3, true, true}, {5, 5, true, false}, {5, 3, false, false}, {5, 7, true, false}} {
		res := uniqueKey(t)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AcceptFence(ctx, tx, res, c.first); err != nil {
			t.Fatal(err)
		}
		blocked := blockedBy(t, pool, tx)
		done := make(chan error, 1)
		go func() { done <- write(ctx, s, pool, res, c.second) }()
		poll.Until(t, "the second writer to wait on the first one's row", func() bool { return blocked() > 0 })
		if c.commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := <-done; errors.Is(err, postgres.ErrStaleFence) != c.stale || (err != nil && !c.stale) {
			t.Errorf("fence %d after %d (committed %v): %v, want stale %v", c.second, c.first, c.commit, err, c.stale)
		}
	}
}

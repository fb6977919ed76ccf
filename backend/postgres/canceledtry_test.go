package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestCanceledTryIsNotGrantedAfterItsGiveBack: TryAcquire (a try that will not wait) with ctx
// deadlines of a fraction of a round trip to a few, by several callers on each of several keys.
// A try whose ctx ends in flight is given back by the portable layer (a Release, in the
// background), which each caller waits for before its next try, and may still reach the server
// after it: it must then take nothing. Once every caller has released what it was told it
// holds, each key is free within a few seconds (leaves in flight), not held for the lease's
// minute by a grant nobody was told of; a lease still listed names a caller that was not told
// it was granted. A key a give-back failed on (its two seconds passed on a loaded machine) may
// keep what a try took, and is not checked.
func TestCanceledTryIsNotGrantedAfterItsGiveBack(t *testing.T) {
	testenv.SkipShort(t, "makes tries for seconds")
	t.Parallel() // it waits on its give-backs
	url := serverURL(t)
	// Enough connections, all open, that a give-back need not wait for one, nor open one,
	// behind the try it gives back.
	s := storeOn(t, poolConfig(t, url, func(c *pgxpool.Config) { c.MaxConns, c.MinConns = 24, 24 }))
	const (
		keys    = 3
		callers = 2 // per key: their tries queue on the key's row, so that some are in flight longer
		tries   = 50
		budget  = 3 * time.Second // of tries per caller, on a loaded machine
		bound   = 5 * time.Second // leaves in flight: each is bounded by a few seconds
	)
	var (
		mu      sync.Mutex
		granted = make(map[string]bool) // holders told they were granted
		unsure  = make(map[string]bool) // keys a give-back of failed on (a loaded machine): what a try took may stay
		wg      sync.WaitGroup
	)
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", uniqueKey(t), i)
		for range callers {
			key := names[i]
			rs := &releases{Store: s}
			m, err := primitives.NewMutex(rs, key, primitives.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				var sent int32 // Releases this caller's Mutex sent: its leases' and its give-backs
				end := time.Now().Add(budget)
				for i := 0; i < tries && time.Now().Before(end); i++ {
					// From well under a round trip to a few: some tries end before they are sent,
					// some in flight, some after their answer.
					d := time.Duration(50+rand.IntN(3000)) * time.Microsecond
					ctx, cancel := context.WithTimeout(context.Background(), d)
					failed := rs.failed.Load()
					l, err := m.TryAcquire(ctx)
					cancel()
					switch {
					case err == nil:
						mu.Lock()
						granted[l.Holder()] = true
						mu.Unlock()
						if err := l.Release(context.Background()); err != nil {
							t.Errorf("Release of a lease just granted: %v", err)
						}
						sent++
					case errors.Is(err, context.DeadlineExceeded):
						if rs.failed.Load() > failed {
							sent++ // the store was asked, and failed: given back in the background
						}
					case !errors.Is(err, core.ErrNotAcquired):
						t.Errorf("TryAcquire: %v", err)
						return
					}
					for wait := time.Now().Add(5 * time.Second); rs.n.Load() < sent; time.Sleep(time.Millisecond) {
						if time.Now().After(wait) { // a give-back takes two seconds at most
							t.Errorf("%d of this caller's %d Releases returned after 5s", rs.n.Load(), sent)
							return
						}
					}
				}
				if err := rs.err.Load(); err != nil {
					t.Logf("a give-back on %s failed: %v", key, *err)
					mu.Lock()
					unsure[key] = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, key := range names {
		if unsure[key] {
			continue
		}
		poll.Within(t, bound, "the key "+key+" free of the leases of tries its callers were told failed", func() (string, bool) {
			snap, err := s.Inspect(context.Background(), key)
			if err != nil {
				return err.Error(), false
			}
			mu.Lock()
			defer mu.Unlock()
			var listed string
			for _, l := range snap.Leases {
				listed += fmt.Sprintf(" %s (fence %d, told granted: %v, %v left)", l.Holder, l.Fence, granted[l.Holder], l.TTL)
			}
			return listed, len(snap.Leases) == 0
		})
	}
}

// releases is a core.Store that counts the Releases that returned, keeps the last error one
// returned, and counts the Acquires that failed (which the portable layer gives back).
type releases struct {
	core.Store
	n      atomic.Int32
	err    atomic.Pointer[error]
	failed atomic.Int32
}

func (r *releases) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := r.Store.Acquire(ctx, req)
	if err != nil {
		r.failed.Add(1)
	}
	return res, err
}

func (r *releases) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	defer r.n.Add(1)
	ok, err := r.Store.Release(ctx, req)
	if err != nil {
		r.err.Store(&err)
	}
	return ok, err
}

// TestTryArrivingAfterItsGiveBackTakesNothing: a TryAcquire whose statement waits on the server
// (another transaction is making the key's row) is canceled, and the cancel request pgx then
// sends is lost (a network that drops it; or it lands after the statement ran), so the statement
// goes on. Its caller's give-back runs while the try still waits. When the row's transaction
// rolls back, the try runs: it must take nothing, or have what it took given back, so that the
// key is free within a few seconds, not held for the lease's minute by a grant its caller was
// told failed.
func TestTryArrivingAfterItsGiveBackTakesNothing(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	var lost atomic.Bool // dials fail: the cancel request is lost; the pool's connections are open
	cfg := poolConfig(t, url, func(c *pgxpool.Config) {
		c.MinConns, c.MaxConns = 4, 4
		dial := c.ConnConfig.DialFunc
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if lost.Load() {
				return nil, errString("the network drops it")
			}
			return dial(ctx, network, addr)
		}
	})
	spool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spool.Close)
	s, err := postgres.New(ctx, spool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var conns []*pgxpool.Conn
	for range 4 {
		c, err := spool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}

	pool := newPool(t, url)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO leasehold_keys (kh, key) VALUES (sha256($1::bytea), $1::bytea)", []byte(key)); err != nil {
		t.Fatal(err)
	}
	// waiting counts the statements that wait for the row's transaction, and those of them
	// that are leaves.
	waiting := func() (all, leaves int) {
		if err := pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE query LIKE '%leasehold_leave%') FROM pg_stat_activity "+
			"WHERE $1::integer = ANY (pg_blocking_pids(pid))", pid).Scan(&all, &leaves); err != nil {
			t.Error(err)
		}
		return all, leaves
	}
	rs := &releases{Store: s}
	m, err := primitives.NewMutex(rs, key, primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		l, err := m.TryAcquire(tctx)
		if err == nil {
			l.Release(ctx)
			err = errString("granted")
		}
		done <- err
	}()
	poll.Until(t, "the try waiting for the key's row", func() bool { n, _ := waiting(); return n == 1 })
	var try int32 // the try's backend
	if err := pool.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE $1::integer = ANY (pg_blocking_pids(pid))", pid).Scan(&try); err != nil {
		t.Fatal(err)
	}
	lost.Store(true)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled try: %v, want context.Canceled", err)
	}
	// The give-back is done, or waits for the try's leave, which waits for the row.
	poll.Until(t, "the try given back, or its leave waiting", func() bool { _, leaves := waiting(); return rs.n.Load() > 0 || leaves > 0 })
	if n, _ := waiting(); n == 0 {
		t.Fatal("the try no longer waits: its cancel request was not lost")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the try run", func() bool {
		var running bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active')", try).Scan(&running); err != nil {
			t.Error(err)
		}
		return !running
	})
	poll.Within(t, 5*time.Second, "the key free of a lease its caller was told failed", func() (string, bool) {
		snap, err := s.Inspect(ctx, key)
		if err != nil {
			return err.Error(), false
		}
		return fmt.Sprintf("%+v", snap.Leases), len(snap.Leases) == 0
	})
}

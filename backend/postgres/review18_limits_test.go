package postgres_test

// An adversarial review of the PostgreSQL driver (review18): each test turns a suspicion into a check.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// TestNumbersAtTheirLimits: TTL and Wait of core.MaxDuration, limits and permits of core.MaxLimit
// summed past 2^31, and fence floors at the driver's maxFloor keep every computation exact in
// SQL: nothing overflows a bigint or an integer, RetryAfter and Inspect's TTL come back near 100
// years, and fences still strictly increase above the highest floor.
func TestNumbersAtTheirLimits(t *testing.T) {
	s := newStore(t, serverURL(t))
	ctx, key := context.Background(), uniqueKey(t)
	const top = core.MaxLimit
	big := core.AcquireRequest{Key: key, Holder: "big", Permits: top - 1, Limit: top, TTL: core.MaxDuration, Wait: core.MaxDuration}
	res, err := s.Acquire(ctx, big)
	if err != nil || !res.Granted {
		t.Fatalf("MaxLimit−1 permits for MaxDuration: %+v, %v", res, err)
	}
	two := core.AcquireRequest{Key: key, Holder: "two", Permits: 2, Limit: top, TTL: core.MaxDuration, Wait: core.MaxDuration}
	res, err = s.Acquire(ctx, two)
	if err != nil || res.Granted {
		t.Fatalf("2 more permits (2^31 in all): %+v, %v; want refused", res, err)
	}
	if res.RetryAfter < core.MaxDuration-time.Hour || res.RetryAfter > core.MaxDuration {
		t.Errorf("RetryAfter %v, want about core.MaxDuration", res.RetryAfter)
	}
	all := core.AcquireRequest{Key: key, Holder: "all", Permits: top, Limit: top, TTL: core.MaxDuration, Wait: core.MaxDuration}
	if res, err := s.Acquire(ctx, all); err != nil || res.Granted {
		t.Fatalf("MaxLimit permits behind: %+v, %v; want refused", res, err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 1 || len(snap.Waiters) != 2 || snap.Limit != top {
		t.Fatalf("Inspect: %+v, %v", snap, err)
	}
	if ttl := snap.Leases[0].TTL; ttl < core.MaxDuration-time.Hour || ttl > core.MaxDuration {
		t.Errorf("Inspect's TTL %v, want about core.MaxDuration", ttl)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "big", Fence: 0}); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	// The line grants "two" (2 permits), then stops at "all", which needs every permit.
	if res, err := s.Acquire(ctx, two); err != nil || !res.Granted {
		t.Fatalf("the head of the line: %+v, %v; want granted", res, err)
	}
	s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "two"})
	if res, err := s.Acquire(ctx, all); err != nil || !res.Granted {
		t.Fatalf("MaxLimit permits at once: %+v, %v; want granted", res, err)
	}
	s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "all"})

	// Fences at the top of the range the driver takes.
	const maxFloor = math.MaxInt64 - 1<<32
	fr := core.AcquireRequest{Key: key, Holder: "f", Permits: 1, Limit: 2, TTL: time.Minute}
	if _, err := s.AcquireAbove(ctx, fr, maxFloor+1); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("a floor above maxFloor: %v, want ErrInvalid", err)
	}
	if _, err := s.RaiseFence(ctx, fr, math.MaxUint64); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("a raise to 2^64−1: %v, want ErrInvalid", err)
	}
	if snap, _ := s.Inspect(ctx, key); len(snap.Leases) != 0 {
		t.Fatalf("a refused floor changed the key: %+v", snap.Leases)
	}
	res, err = s.AcquireAbove(ctx, fr, maxFloor)
	if err != nil || !res.Granted || res.Fence != maxFloor {
		t.Fatalf("AcquireAbove(maxFloor): %+v, %v; want fence %d", res, err, uint64(maxFloor))
	}
	last := res.Fence
	for i := range 3 {
		h := fr
		h.Holder = fmt.Sprint("next", i)
		res, err := s.Acquire(ctx, h)
		if err != nil || !res.Granted || res.Fence <= last {
			t.Fatalf("a grant after the highest floor: %+v, %v; want a fence above %d", res, err, last)
		}
		last = res.Fence
		s.Release(ctx, core.ReleaseRequest{Key: key, Holder: h.Holder, Fence: res.Fence})
	}
	// A release with a fence beyond a bigint matches nothing.
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "f", Fence: math.MaxUint64}); err != nil || ok {
		t.Errorf("Release with fence 2^64−1: %v, %v; want false", ok, err)
	}
}

// TestWeightedLineKeepsExclusion: workers with Stores of their own take 1 to 4 of a key's 4
// permits through the line; some give up (short acquire timeouts) while granted meanwhile, some
// ask with a lower limit (3), and are refused with a limit mismatch while the others hold or
// wait. The permits held at once, counted by the workers, never pass 4 (nor 3 while the key is
// under limit 3), and every worker that stays is served.
func TestWeightedLineKeepsExclusion(t *testing.T) {
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	const workers, rounds, limit = 6, 15, 4
	var (
		inUse atomic.Int64
		wg    sync.WaitGroup
	)
	for i := range workers {
		s := newStore(t, url)
		lim := limit
		if i%3 == 2 {
			lim = limit - 1 // a client that disagrees on the limit
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 18))
			for range rounds {
				timeout := time.Minute
				if rng.IntN(3) == 0 {
					timeout = time.Duration(1+rng.IntN(20)) * time.Millisecond
				}
				sem, _ := primitives.NewSemaphore(s, key, lim, primitives.WithTTL(time.Minute),
					primitives.WithAcquireTimeout(timeout), primitives.WithRetryInterval(time.Hour))
				n := 1 + rng.IntN(lim)
				l, err := sem.Acquire(ctx, n)
				if err != nil {
					if !errors.Is(err, core.ErrNotAcquired) && !errors.Is(err, core.ErrLimitMismatch) {
						t.Error(err)
					}
					continue
				}
				if v := inUse.Add(int64(n)); v > int64(lim) {
					t.Errorf("%d permits held at once, limit %d", v, lim)
				}
				if _, err := s.Inspect(ctx, key); err != nil { // hold it for a round trip
					t.Error(err)
				}
				inUse.Add(-int64(n))
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		snap, _ := newStore(t, url).Inspect(ctx, key)
		t.Fatalf("workers stranded: leases %+v, line %+v", snap.Leases, snap.Waiters)
	}
	snap, err := newStore(t, url).Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 0 {
		t.Errorf("after every worker released: leases %+v, %v; want none", snap.Leases, err)
	}
}

// TestAcceptFenceOnANewResourceConcurrently: two transactions check fences on a resource never
// seen before; the second waits on the first's uncommitted row. A lower fence is refused once the
// first commits, an equal one passes, and after the first rolls back the second is accepted.
func TestAcceptFenceOnANewResourceConcurrently(t *testing.T) {
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
		done := make(chan error, 1)
		go func() { done <- write(ctx, s, pool, res, c.second) }()
		waitFor(t, "the second writer to wait on the first one's row", func() bool {
			var n int
			pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").Scan(&n)
			return n > 0
		})
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

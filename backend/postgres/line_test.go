package postgres_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestPermitsChangeInLine: a holder waiting in line that asks again with other permits has its
// place changed, not doubled; a holder that holds a lease and asks with other permits is refused
// with ErrInvalid and keeps its lease and fence.
func TestPermitsChangeInLine(t *testing.T) {
	t.Parallel()
	s := newStore(t, serverURL(t))
	ctx, key := context.Background(), uniqueKey(t)
	h := core.AcquireRequest{Key: key, Holder: "h", Permits: 2, Limit: 3, TTL: time.Minute}
	held, err := s.Acquire(ctx, h)
	if err != nil || !held.Granted {
		t.Fatal(held, err)
	}
	w := core.AcquireRequest{Key: key, Holder: "w", Permits: 3, Limit: 3, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, w); err != nil || res.Granted {
		t.Fatalf("3 of 3 with 2 held: %+v, %v; want refused", res, err)
	}
	w.Permits = 1 // would fit, but keeps its place rather than jumping it
	if res, err := s.Acquire(ctx, w); err != nil || !res.Granted {
		// Alone in line, its place is at the head: the line serves it as it asks now.
		t.Fatalf("the head asking 1 of 3 with 2 held: %+v, %v; want granted", res, err)
	}
	snap, _ := s.Inspect(ctx, key)
	if len(snap.Waiters) != 0 || snap.InUse() != 3 {
		t.Fatalf("line %+v, leases %+v: want the place served once", snap.Waiters, snap.Leases)
	}
	h.Permits = 1
	if _, err := s.Acquire(ctx, h); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("the holder asking other permits: %v, want ErrInvalid", err)
	}
	snap, _ = s.Inspect(ctx, key)
	for _, l := range snap.Leases {
		if l.Holder == "h" && (l.Permits != 2 || l.Fence != held.Fence) {
			t.Errorf("the holder's lease after a refused change: %+v; want 2 permits, fence %d", l, held.Fence)
		}
	}
}

// TestWeightedLineKeepsExclusion: workers with Stores of their own take 1 to 4 of a key's 4
// permits through the line; some give up (short acquire timeouts) while granted meanwhile, some
// ask with a lower limit (3), and are refused with a limit mismatch while the others hold or
// wait. The permits held at once, counted by the workers, never pass 4 (nor 3 while the key is
// under limit 3), and every worker that stays is served.
func TestWeightedLineKeepsExclusion(t *testing.T) {
	testenv.SkipShort(t, "workers with Stores of their own race on the line")
	t.Parallel()
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

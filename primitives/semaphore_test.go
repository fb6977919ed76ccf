package primitives_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// mustSemaphore returns a Semaphore of limit permits on the key "pool", or fails the test.
func mustSemaphore(t *testing.T, store core.Store, limit int, opts ...primitives.Option) *primitives.Semaphore {
	t.Helper()
	s, err := primitives.NewSemaphore(store, "pool", limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSemaphoreWeightedPermitsShareKeySpace(t *testing.T) {
	store := memory.New()
	s := mustSemaphore(t, store, 4)
	ctx := t.Context()
	big, err := s.Acquire(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if big.Permits() != 3 {
		t.Errorf("Permits = %d, want 3", big.Permits())
	}
	if _, err := s.TryAcquire(ctx, 2); !errors.Is(err, core.ErrNotAcquired) {
		t.Errorf("TryAcquire(2) with 1 free: err = %v, want ErrNotAcquired", err)
	}
	small, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire(1) with 1 free: %v", err)
	}
	// A Mutex on the same key is a Semaphore of limit 1: the key is held under limit 4.
	m := mustMutexOn(t, store, "pool")
	if _, err := m.TryAcquire(ctx); !errors.Is(err, core.ErrLimitMismatch) {
		t.Errorf("Mutex on a semaphore's key: err = %v, want ErrLimitMismatch", err)
	}
	snap, _ := store.Inspect(ctx, "pool")
	if snap.InUse() != 4 || snap.Limit != 4 {
		t.Errorf("Inspect: %d in use of %d, want 4 of 4", snap.InUse(), snap.Limit)
	}
	mustRelease(t, big)
	mustRelease(t, small)
}

func TestSemaphoreLargeRequestIsNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		s := mustSemaphore(t, store, 3, primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(2*time.Hour))
		held, err := s.Acquire(context.Background(), 3)
		if err != nil {
			t.Fatal(err)
		}
		bigDone := acquireAsync(t, s, 3)
		synctest.Wait() // the large request is first in line
		smallDone := acquireAsync(t, s, 1)
		synctest.Wait()
		mustRelease(t, held)
		big := <-bigDone
		synctest.Wait()
		select {
		case <-smallDone:
			t.Fatal("the small request got in while the large one held everything")
		default:
		}
		mustRelease(t, big)
		mustRelease(t, <-smallDone)
	})
}

func TestSemaphoreNeverExceedsLimit(t *testing.T) {
	store := memory.New()
	const limit = 5
	s := mustSemaphore(t, store, limit, primitives.WithRetryInterval(time.Millisecond))
	occ := conformance.NewOccupancy(limit)
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for r := range 30 {
				n := 1 + (w+r)%3
				l, err := s.Acquire(context.Background(), n)
				if err != nil {
					t.Error(err)
					return
				}
				occ.Enter(n)()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if p := occ.Peak(); p > limit {
		t.Errorf("peak %d permits in use, limit %d", p, limit)
	}
}

func TestSemaphoreAdoptKeepsPermits(t *testing.T) {
	store := memory.New()
	s := mustSemaphore(t, store, 4, primitives.WithoutRefresh())
	l, err := s.Acquire(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := s.Adopt(t.Context(), l.Holder())
	if err != nil {
		t.Fatal(err)
	}
	if adopted.Permits() != 3 || adopted.Fence() != l.Fence() {
		t.Errorf("adopted %d permits with fence %d, want 3 with %d", adopted.Permits(), adopted.Fence(), l.Fence())
	}
	mustRelease(t, adopted)
	if err := l.Release(t.Context()); !errors.Is(err, core.ErrLost) {
		t.Errorf("releasing the original after the adopter released: %v, want ErrLost", err)
	}
}

func TestSemaphoreOfAnotherLimitIsRefusedAtOnce(t *testing.T) {
	store := memory.New()
	two, err := primitives.NewSemaphore(store, "gpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	five, err := primitives.NewSemaphore(store, "gpu", 5)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for range 2 {
		l, err := two.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Release(context.Background()) })
	}
	// Acquire would wait for a free permit; a mismatch is not worth waiting for.
	_, err = five.Acquire(ctx, 1)
	const want = `leasehold: acquire "gpu": limit mismatch: the key is held under limit 2, this request has 5`
	if !errors.Is(err, core.ErrLimitMismatch) || err.Error() != want {
		t.Fatalf("Acquire of a Semaphore(5) beside two Semaphore(2) leases: %v, want %q", err, want)
	}
	if snap, _ := store.Inspect(ctx, "gpu"); snap.InUse() != 2 || len(snap.Waiters) != 0 || snap.Limit != 2 {
		t.Errorf("after the refusal: %+v, want the two leases alone, limit 2", snap)
	}
}

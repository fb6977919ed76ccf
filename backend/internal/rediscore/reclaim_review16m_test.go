package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/core"
)

// Adversarial review of issue 16 as a whole (review16m): a waiter slow to enroll.

// TestWaiterEnrollingAfterItsGrantWasReclaimedIsWoken_review16m: a caller whose try was refused
// with a place in the line, on a key its Store already listens to, is granted the lease by the
// line before it enrolls (Register); it stays away longer than the Store's reclaimAfter (a long
// GC pause, a descheduled goroutine), so the Store gives the grant back to the line and, with it,
// the caller's place. When the caller then enrolls, its waiter must start woken, so that it
// tries again (and here, the key being free, is granted): not sit Reliable, sending nothing,
// until the refusal's RetryAfter (the first holder's one-minute TTL) while nobody holds the key.
func TestWaiterEnrollingAfterItsGrantWasReclaimedIsWoken_review16m(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		ctx := context.Background()
		s, other := mk(), mk()
		req := func(holder string, wait time.Duration) core.AcquireRequest {
			return core.AcquireRequest{Key: "slow", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait, Unshared: true}
		}
		first := mustAcquire(t, other, req("first", 0), true)
		// s listens to the key: an earlier waiter of s enrolled there, and left.
		mustAcquire(t, s, req("earlier", time.Minute), false)
		w, err := s.Register(ctx, req("earlier", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		pollUntil(t, w.Reliable)
		w.Close()
		pollUntil(t, func() bool { return lineLen(t, addr, "slow") == 0 })
		// The slow caller's try: refused, with a place.
		refused := mustAcquire(t, s, req("slow", time.Minute), false)
		if refused.RetryAfter < 30*time.Second {
			t.Fatalf("the slow caller's refusal says RetryAfter %v; want the first lease's TTL", refused.RetryAfter)
		}
		if ok, err := other.Release(ctx, core.ReleaseRequest{Key: "slow", Holder: "first", Fence: first.Fence}); !ok || err != nil {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		// The line granted it the lease; s, hearing no waiter enroll, gives it back.
		pollUntil(t, func() bool {
			snap, err := other.Inspect(ctx, "slow")
			return err == nil && len(snap.Leases) == 0 && len(snap.Waiters) == 0
		})
		slow, err := s.Register(ctx, req("slow", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		select {
		case <-slow.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("the waiter that enrolled after its grant was given back was not woken (Reliable %v): it would wait for the RetryAfter of %v while the key is free",
				slow.Reliable(), refused.RetryAfter)
		}
		got := mustAcquire(t, s, req("slow", time.Minute), true)
		s.Release(ctx, core.ReleaseRequest{Key: "slow", Holder: "slow", Fence: got.Fence})
	})
}

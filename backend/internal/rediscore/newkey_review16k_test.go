package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/core"
)

// Adversarial review of cd9c1f8 (review16k): an acquire on a new key, or on one whose lease hash
// would not outlive the lease, takes the uncontended path and sets the hash's keep and expiry
// there.

// TestNewKeyFastPathKeepsTheHashReview16k: through each driver on a real server, a new key's
// first grant leaves a lease hash whose keep and PTTL are twice the lease's TTL; its release
// deletes the hash; a hash of counters alone near the end of its keep (as one kept for a fence
// above the clock) gets both renewed by the next grant, keeping its fence counter (the next
// fence above the last); once the hash is gone, fences still rise (the server clock carries
// them); a semaphore's grant on a new key records its limit, which the next grant counts.
func TestNewKeyFastPathKeepsTheHashReview16k(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		ctx := context.Background()
		s := mk()
		c := raw(t, addr)
		const ttl = 2 * time.Second
		serverMs := func() uint64 { return uint64(c.Time(ctx).Val().UnixMilli()) }
		checkKept := func(key, when string) {
			t.Helper()
			now := serverMs()
			cs := countersOf(t, c, key)
			want := now + uint64((2 * ttl).Milliseconds())
			if cs.keep+1000 < want || cs.keep > want+1000 {
				t.Errorf("%s: keep %d, want about %d (now %d + twice the ttl)", when, cs.keep, want, now)
			}
			if p := pttl(t, c, key, 0); p < 2*ttl-time.Second || p > 2*ttl {
				t.Errorf("%s: PTTL of the lease hash %v, want about %v", when, p, 2*ttl)
			}
		}
		req := core.AcquireRequest{Key: "newkey", Holder: "h", Permits: 1, Limit: 1, TTL: ttl}
		r1 := mustAcquire(t, s, req, true)
		checkKept(req.Key, "new key")
		if cs := countersOf(t, c, req.Key); cs.fence != r1.Fence || cs.limit != 1 {
			t.Errorf("new key: counters %+v, want fence %d, limit 1", cs, r1.Fence)
		}
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: "h", Fence: r1.Fence}); err != nil {
			t.Fatal(err)
		}

		if n := c.Exists(ctx, rediscore.Keys(req.Key)...).Val(); n != 0 {
			t.Errorf("the release of the key's only lease left %d keys", n)
		}

		// Counters alone, whose keep and expiry run out before the next lease would.
		k := rediscore.Keys(req.Key)[0]
		short := int64(ttl.Milliseconds()) - 1000
		if err := c.HSet(ctx, k, "keep", int64(serverMs())+short, "fence", r1.Fence, "limit", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.PExpire(ctx, k, time.Duration(short)*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		req.Holder = "h2"
		r2 := mustAcquire(t, s, req, true)
		if r2.Fence <= r1.Fence {
			t.Errorf("after the idle key's grant the fence is %d, not above the last, %d", r2.Fence, r1.Fence)
		}
		checkKept(req.Key, "idle key")

		// The hash gone (expired): the next fence is still above the last.
		if err := c.Del(ctx, rediscore.Keys(req.Key)...).Err(); err != nil {
			t.Fatal(err)
		}
		req.Holder = "h3"
		if r3 := mustAcquire(t, s, req, true); r3.Fence <= r2.Fence {
			t.Errorf("after the hash expired the fence is %d, not above the last, %d", r3.Fence, r2.Fence)
		}
		checkKept(req.Key, "expired key")

		// A semaphore's first grant on a new key records its limit.
		sem := core.AcquireRequest{Key: "newsem", Holder: "a", Permits: 2, Limit: 3, TTL: ttl}
		mustAcquire(t, s, sem, true)
		if cs := countersOf(t, c, sem.Key); cs.limit != 3 {
			t.Errorf("semaphore on a new key: limit %d, want 3", cs.limit)
		}
		checkKept(sem.Key, "new semaphore")
		sem.Holder = "b"
		mustAcquire(t, s, sem, false)
		sem.Permits = 1
		mustAcquire(t, s, sem, true)
		// More permits than the limit on a new key: refused, and no hash made.
		over := core.AcquireRequest{Key: "newover", Holder: "a", Permits: 2, Limit: 1, TTL: ttl}
		if res, err := s.Acquire(ctx, over); err == nil && res.Granted {
			t.Errorf("2 permits of a limit of 1 on a new key granted: %+v", res)
		}
		if n := c.Exists(ctx, rediscore.Keys(over.Key)...).Val(); n != 0 {
			t.Errorf("a refused try on a new key left %d keys", n)
		}
	})
}

package rediscore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// Tests of the lock delay: a lease granted with a LockDelay that expires unreleased keeps its
// permits closed until its expiry plus the delay, by the server's clock, on every path a lease is
// granted, renewed or read by.

// delayedOf returns key's delayed leases as Inspect reports them.
func delayedOf(t *testing.T, s core.Store, key string) []core.DelayInfo {
	t.Helper()
	snap, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Delayed
}

// TestLockDelayOutlivesTheLeaseHashsExpiry: on miniredis, whose clock the test moves: whichever
// path grants or renews a lease with a lock delay (the quick acquire of a free key, the fast
// path of a hash of counters, the general path beside another lease, the holder's own renewal,
// a grant from the line, and the quick, fast and general extends; and a watch's call while the
// delay lasts), the lease hash's expiry covers
// the lease's expiry plus its delay: half an hour into the delay the key still holds it, closed
// to a newcomer, and its PTTL reaches the delay's end.
func TestLockDelayOutlivesTheLeaseHashsExpiry(t *testing.T) {
	t.Parallel()
	const delay = time.Hour
	req := func(key, holder string, limit int, ttl, wait, lockDelay time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: limit, TTL: ttl, Wait: wait, LockDelay: lockDelay}
	}
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		// grant leaves key's holder "a" with a lease and its delay, on a server whose clock it
		// moves by step, and returns when a's lease expires.
		grant func(t *testing.T, s redisharness.Store, c *redis.Client, step func(time.Duration)) time.Duration
	}{
		{"quick acquire", func(t *testing.T, s redisharness.Store, _ *redis.Client, _ func(time.Duration)) time.Duration {
			mustAcquire(t, s, req("k", "a", 1, time.Minute, 0, delay), true)
			return time.Minute
		}},
		{"fast acquire", func(t *testing.T, s redisharness.Store, c *redis.Client, _ func(time.Duration)) time.Duration {
			// A hash of counters alone, one of which the quick acquire does not take.
			keep := strconv.FormatInt(start.Add(time.Second).UnixMilli(), 10)
			if err := c.HSet(ctx, rediscore.Keys("k")[0], "fence", "1", "limit", "1", "seq", "3", rediscore.KeepField, keep).Err(); err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, s, req("k", "a", 1, time.Minute, 0, delay), true)
			return time.Minute
		}},
		{"general acquire", func(t *testing.T, s redisharness.Store, _ *redis.Client, _ func(time.Duration)) time.Duration {
			z := mustAcquire(t, s, req("k", "z", 2, time.Minute, 0, 0), true)
			mustAcquire(t, s, req("k", "a", 2, time.Minute, 0, delay), true)
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "z", Fence: z.Fence}); !ok || err != nil {
				t.Fatalf("z's Release = %v, %v", ok, err)
			}
			return time.Minute
		}},
		{"watched in the delay", func(t *testing.T, s redisharness.Store, c *redis.Client, step func(time.Duration)) time.Duration {
			// A key with no lease but a delayed one, watched for a minute: the watch's call
			// must not cut the hash's expiry down to what the watch needs.
			mustAcquire(t, s, req("k", "a", 1, time.Minute, 0, delay), true)
			step(2 * time.Minute)
			script(t, c, srcWatch, "k", time.Minute.Milliseconds())
			return time.Minute
		}},
		{"renewal by the holder", func(t *testing.T, s redisharness.Store, _ *redis.Client, _ func(time.Duration)) time.Duration {
			mustAcquire(t, s, req("k", "a", 1, time.Minute, 0, 0), true)
			mustAcquire(t, s, req("k", "a", 1, time.Minute, 0, delay), true)
			return time.Minute
		}},
		{"grant from the line", func(t *testing.T, s redisharness.Store, _ *redis.Client, _ func(time.Duration)) time.Duration {
			y := mustAcquire(t, s, req("k", "y", 1, time.Minute, 0, 0), true)
			mustAcquire(t, s, req("k", "a", 1, time.Minute, time.Hour, delay), false)
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "y", Fence: y.Fence}); !ok || err != nil {
				t.Fatalf("y's Release = %v, %v", ok, err)
			}
			return time.Minute // granted untaken, by the release, at the time of the release
		}},
		// The extends: a's lease, granted for an hour with an hour's delay, is extended for three
		// hours a minute before it expires, past the four hours the grant kept the hash for.
		{"quick extend", func(t *testing.T, s redisharness.Store, _ *redis.Client, step func(time.Duration)) time.Duration {
			mustAcquire(t, s, req("k", "a", 1, time.Hour, 0, delay), true)
			step(59 * time.Minute)
			extendFor(t, s, 3*time.Hour)
			return 59*time.Minute + 3*time.Hour
		}},
		{"fast extend", func(t *testing.T, s redisharness.Store, _ *redis.Client, step func(time.Duration)) time.Duration {
			mustAcquire(t, s, req("k", "a", 2, time.Hour, 0, delay), true)
			mustAcquire(t, s, req("k", "z", 2, time.Hour, 0, 0), true) // unexpired at the extend
			step(59 * time.Minute)
			extendFor(t, s, 3*time.Hour)
			return 59*time.Minute + 3*time.Hour
		}},
		{"general extend", func(t *testing.T, s redisharness.Store, _ *redis.Client, step func(time.Duration)) time.Duration {
			mustAcquire(t, s, req("k", "a", 2, time.Hour, 0, delay), true)
			mustAcquire(t, s, req("k", "z", 2, time.Minute, 0, 0), true) // expired at the extend
			step(59 * time.Minute)
			extendFor(t, s, 3*time.Hour)
			return 59*time.Minute + 3*time.Hour
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := miniredis.RunT(t)
			now := start
			m.SetTime(now)
			s, c := redisharness.GoRedis(t, m.Addr()), raw(t, m.Addr())
			step := func(d time.Duration) {
				now = now.Add(d)
				m.SetTime(now)
				m.FastForward(d)
			}
			expiry := tc.grant(t, s, c, step)
			step(expiry - now.Sub(start) + delay/2)
			d := delayedOf(t, s, "k")
			if len(d) != 1 || d[0].Holder != "a" || d[0].Left != delay/2 {
				t.Fatalf("half way into the delay: delayed %+v, want a's with %v left", d, delay/2)
			}
			if p := pttl(t, c, "k", 0); p < delay/2 {
				t.Errorf("lease hash PTTL %v half way into the delay, want at least the %v it has left", p, delay/2)
			}
			all := req("k", "b", limitOf(t, s, "k"), time.Minute, 0, 0)
			all.Permits = all.Limit // every permit: a's are closed
			res := mustAcquire(t, s, all, false)
			if res.RetryAfter != delay/2 {
				t.Errorf("a newcomer's RetryAfter %v, want the %v until the delay ends", res.RetryAfter, delay/2)
			}
			step(delay/2 + time.Millisecond)
			if d := delayedOf(t, s, "k"); len(d) != 0 {
				t.Errorf("after the delay: delayed %+v, want none", d)
			}
		})
	}
}

// limitOf returns key's limit as Inspect reports it.
func limitOf(t *testing.T, s core.Store, key string) int {
	t.Helper()
	snap, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Limit
}

// extendFor extends a's lease on k for ttl.
func extendFor(t *testing.T, s core.Store, ttl time.Duration) {
	t.Helper()
	if _, err := s.Extend(context.Background(), core.ExtendRequest{Key: "k", Holder: "a", TTL: ttl}); err != nil {
		t.Fatalf("a's Extend: %v", err)
	}
}

// TestLeaseInItsLockDelayIsNotHeld: a lease that expired unreleased with a lock delay is over
// (Extend is ErrLost, Release reports false and leaves the delay) while its permits stay closed:
// on a mutex (whose hash is then laid out as the quick paths' lone lease) to everyone, and on a
// semaphore to its holder, whose own request is refused while the delay lasts though permits are
// free, and not to others; the refusals' RetryAfter is when the delay ends, the key keeps the
// delayed lease's limit, and a lease released before its expiry leaves no delay.
func TestLeaseInItsLockDelayIsNotHeld(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		s, other := mk(), mk()
		ctx := context.Background()
		const delay = time.Hour
		req := func(key, holder string, limit int, ttl time.Duration) core.AcquireRequest {
			return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: limit, TTL: ttl, LockDelay: delay}
		}
		fa := mustAcquire(t, s, req("mutex", "a", 1, 50*time.Millisecond), true).Fence
		mustAcquire(t, s, req("sem", "a", 3, 50*time.Millisecond), true)
		mustAcquire(t, s, req("sem", "z", 3, time.Hour), true)
		poll.Until(t, "the leases to expire into their delay", func() bool {
			return len(delayedOf(t, s, "mutex")) == 1 && len(delayedOf(t, s, "sem")) == 1
		})
		for _, key := range []string{"mutex", "sem"} {
			if _, err := other.Extend(ctx, core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
				t.Errorf("%s: Extend of a lease in its delay: %v, want ErrLost", key, err)
			}
			for _, fence := range []uint64{fa, 0} {
				if ok, err := other.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: fence}); ok || err != nil {
					t.Errorf("%s: Release of a lease in its delay = %v, %v; want false", key, ok, err)
				}
			}
			limit := map[string]int{"mutex": 1, "sem": 3}[key]
			if res := mustAcquire(t, other, req(key, "a", limit, time.Minute), false); res.RetryAfter < delay/2 || res.RetryAfter > delay {
				t.Errorf("%s: the holder's own Acquire in its delay: RetryAfter %v, want the delay's end", key, res.RetryAfter)
			}
			d := delayedOf(t, s, key)
			if len(d) != 1 || d[0].Holder != "a" || d[0].Permits != 1 || d[0].Left < delay/2 || d[0].Left > delay {
				t.Errorf("%s: after the holder's Extend, Releases and Acquire: delayed %+v, want a's, about %v left", key, d, delay)
			}
			if got := limitOf(t, s, key); got != limit {
				t.Errorf("%s: limit %d in the delay, want the delayed lease's %d", key, got, limit)
			}
		}
		if res := mustAcquire(t, other, req("mutex", "b", 1, time.Minute), false); res.RetryAfter < delay/2 || res.RetryAfter > delay {
			t.Errorf("a newcomer on the mutex in its delay: RetryAfter %v, want the delay's end", res.RetryAfter)
		}
		if _, err := other.Acquire(ctx, req("mutex", "b", 2, time.Minute)); !errors.Is(err, core.ErrLimitMismatch) {
			t.Errorf("another limit on the mutex in its delay: %v, want ErrLimitMismatch", err)
		}
		mustAcquire(t, other, req("sem", "b", 3, time.Minute), true) // the third permit is free
		if res := mustAcquire(t, other, req("sem", "c", 3, time.Minute), false); res.RetryAfter < delay/2 || res.RetryAfter > delay {
			t.Errorf("a newcomer on the full semaphore: RetryAfter %v, want the delay's end (before the leases' with theirs)", res.RetryAfter)
		}

		// Released before they expire, on the quick path (a lone lease) and the fast one (beside
		// another lease), leases with a delay leave none.
		for _, key := range []string{"released-alone", "released-beside"} {
			if key == "released-beside" {
				mustAcquire(t, s, req(key, "z", 2, time.Hour), true)
			}
			limit := map[string]int{"released-alone": 1, "released-beside": 2}[key]
			f := mustAcquire(t, s, req(key, "a", limit, time.Minute), true).Fence
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: f}); !ok || err != nil {
				t.Fatalf("%s: Release = %v, %v", key, ok, err)
			}
			if d := delayedOf(t, s, key); len(d) != 0 {
				t.Errorf("%s: after the release: delayed %+v, want none", key, d)
			}
			mustAcquire(t, other, req(key, "b", limit, time.Minute), true)
		}
	})
}

// TestLineHeadIsGrantedWhenTheLockDelayEnds: a waiter in line behind a lease that expires with a
// lock delay is not granted at the expiry, nor by another caller's try meanwhile, but when the
// delay ends, by the try its RetryAfter schedules: settled in line, it sends that one try and
// nothing else.
func TestLineHeadIsGrantedWhenTheLockDelayEnds(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		s := mk()
		mustAcquire(t, s, core.AcquireRequest{Key: "line", Holder: "a", Permits: 1, Limit: 1, TTL: 300 * time.Millisecond,
			LockDelay: 2 * time.Second}, true)
		w := watch(mk())
		m, err := primitives.NewMutex(w, "line", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		got := acquireInBackground(t, m)
		var d []core.DelayInfo
		var sent time.Time
		poll.Until(t, "the waiter settled in line behind the delay (or granted)", func() bool {
			sent = time.Now()
			d = delayedOf(t, s, "line")
			return len(got) > 0 || (len(d) == 1 && lineLen(t, addr, "line") == 1 && w.settled())
		})
		if len(got) > 0 {
			if l := <-got; l != nil {
				l.Release(context.Background())
			}
			t.Fatalf("the waiter was granted before it settled in line behind the delay: delayed %+v", d)
		}
		// A newcomer's try during the delay (which serves the line first) grants nobody.
		mustAcquire(t, mk(), core.AcquireRequest{Key: "line", Holder: "n", Permits: 1, Limit: 1, TTL: time.Minute}, false)
		if snap, err := s.Inspect(context.Background(), "line"); err != nil || len(snap.Leases) != 0 || len(snap.Waiters) != 1 {
			t.Fatalf("after a newcomer's try in the delay: %+v, %v; want no lease and the waiter in line", snap, err)
		}
		before := commands(t, addr)
		// Left is in whole ms, rounded up from the server's ms: the delay ends at most a ms before.
		ends := sent.Add(d[0].Left - time.Millisecond)
		select {
		case l := <-got:
			at := time.Now()
			if l == nil {
				return
			}
			defer l.Release(context.Background())
			if at.Before(ends) {
				t.Errorf("the waiter was granted %v before the delay ended", ends.Sub(at))
			}
			if n := commands(t, addr) - before; n != 1 {
				t.Errorf("the waiter sent %d commands from settling in line to its grant, want 1: its try when the delay ends", n)
			}
		case <-time.After(d[0].Left + 20*time.Second):
			t.Fatalf("the waiter was not granted within 20s of the delay's end")
		}
	})
}

// TestLockDelayOnANodeWithARaisedFence: on miniredis, a Redlock node's grant (a fence floor ten
// minutes ahead of the clock, which the hash must outlive) with an hour's lock delay: half an
// hour on, past the fence and the lease's expiry, the delay still closes the key, whose hash
// lives until it ends; then the next grant is above the floor. The same grant released leaves no
// delay: the key is free at once, its counters kept until the clock passes the fence.
func TestLockDelayOnANodeWithARaisedFence(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	s, c := redisharness.GoRedis(t, m.Addr()), raw(t, m.Addr())
	ctx := context.Background()
	step := func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	}
	floor := uint64(now.Add(10 * time.Minute).UnixMicro())
	req := func(key, holder string, delay time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, LockDelay: delay}
	}
	for _, key := range []string{"expires", "released"} {
		res, err := s.(core.FenceRaiser).AcquireAbove(ctx, req(key, "a", time.Hour), floor)
		if err != nil || !res.Granted || res.Fence != floor {
			t.Fatalf("%s: AcquireAbove = %+v, %v; want granted at the floor %d", key, res, err, floor)
		}
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "released", Holder: "a", Fence: floor}); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if res := mustAcquire(t, s, req("released", "b", 0), true); res.Fence <= floor {
		t.Errorf("the grant after the node's release: fence %d, want above the floor %d", res.Fence, floor)
	}
	step(30 * time.Minute)
	d := delayedOf(t, s, "expires")
	if len(d) != 1 || d[0].Fence != floor || d[0].Left != 31*time.Minute {
		t.Fatalf("half an hour on: delayed %+v, want a's at fence %d with 31m left", d, floor)
	}
	if p := pttl(t, c, "expires", 0); p < 31*time.Minute {
		t.Errorf("lease hash PTTL %v, want at least the 31m the delay has left", p)
	}
	if res := mustAcquire(t, s, req("expires", "b", 0), false); res.RetryAfter != 31*time.Minute {
		t.Errorf("a newcomer in the delay: RetryAfter %v, want 31m", res.RetryAfter)
	}
	step(31*time.Minute + time.Millisecond)
	if res := mustAcquire(t, s, req("expires", "b", 0), true); res.Fence <= floor {
		t.Errorf("the grant after the delay: fence %d, want above the floor %d", res.Fence, floor)
	}
}

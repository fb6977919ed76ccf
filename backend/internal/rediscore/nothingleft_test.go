package rediscore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// Tests of what a key leaves behind: nothing once nobody holds, waits for or watches it, but a
// lease hash kept until the clock passes a fence raised above it; and, for a key left held or
// waited for by processes that died, nothing after a bound that does not depend on the waits.

// keysMatching returns the server's keys whose names contain s (SCAN, to the end).
func keysMatching(t *testing.T, c *redis.Client, s string) []string {
	t.Helper()
	var all []string
	var cursor uint64
	for {
		keys, next, err := c.Scan(context.Background(), cursor, "*"+s+"*", 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, keys...)
		if cursor = next; cursor == 0 {
			return all
		}
	}
}

// TestReleasedKeyLeavesNothingBehind: a Mutex held through one driver hands over to a waiter of
// the other driver (one woken by the release alone, and one with the default options, which may
// retry meanwhile), which releases: no Redis key of the resource is left, neither at once nor
// once both Stores are closed (having sent every leave they owed).
func TestReleasedKeyLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	for _, pair := range [][2]string{{"goredis", "valkey"}, {"valkey", "goredis"}} {
		for _, woken := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/%s/woken=%v", pair[0], pair[1], woken), func(t *testing.T) {
				t.Parallel()
				holder, waiter := redisharness.Drivers[pair[0]](t, srv.Addr), redisharness.Drivers[pair[1]](t, srv.Addr)
				key := fmt.Sprintf("invoice:%s:%v", pair[0], woken)
				w := watch(waiter)
				mh, _ := primitives.NewMutex(holder, key)
				mw, _ := primitives.NewMutex(w, key)
				if woken {
					mw, _ = primitives.NewMutex(w, key, primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(time.Minute))
				}
				l, err := mh.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan core.Lease, 1)
				go func() {
					l2, err := mw.Acquire(context.Background())
					if err != nil {
						t.Error(err)
					}
					got <- l2
				}()
				if woken {
					poll.Until(t, "the waiter in line with its subscription confirmed", w.settled) // in line, and its subscription confirmed
				} else {
					poll.Until(t, "the waiter to register", func() bool { return w.registered() > 0 })
				}
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				l2 := <-got
				if l2 == nil {
					t.FailNow()
				}
				if err := l2.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				if keys := keysMatching(t, c, key); len(keys) != 0 {
					t.Errorf("after the last release: keys %q left", keys)
				}
				holder.Close()
				waiter.Close()
				if keys := keysMatching(t, c, key); len(keys) != 0 {
					t.Errorf("after both Stores closed: keys %q left", keys)
				}
			})
		}
	}
}

// TestRaisedFenceKeepsTheHashUntilTheClockPassesIt: a lease whose fence was raised above the
// server clock (a Redlock node's) leaves its lease hash, once released, until the clock passes
// the fence and no longer; the next grant's fence is above it either way.
func TestRaisedFenceKeepsTheHashUntilTheClockPassesIt(t *testing.T) {
	testenv.SkipShort(t, "waits 1.5 s for the server clock")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			const ahead = 1500 * time.Millisecond
			fence := uint64(c.Time(ctx).Val().Add(ahead).UnixMicro())
			req := core.AcquireRequest{Key: "raised", Holder: "a", Permits: 1, Limit: 1, TTL: 100 * time.Millisecond}
			res, err := s.(core.FenceRaiser).RaiseFence(ctx, req, fence)
			if err != nil || !res.Granted || res.Fence != fence {
				t.Fatalf("RaiseFence = %+v, %v; want fence %d", res, err, fence)
			}
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "raised", Holder: "a", Fence: fence}); err != nil {
				t.Fatal(err)
			}
			if p := pttl(t, c, "raised", 0); p <= 0 || p > ahead {
				t.Errorf("after the release: lease hash PTTL %v, want until the clock passes the fence, at most %v", p, ahead)
			}
			if keys := keysMatching(t, c, "raised"); len(keys) != 1 {
				t.Errorf("after the release: keys %q, want the lease hash alone", keys)
			}
			poll.Until(t, "the raised hash to expire", func() bool { return len(keysMatching(t, c, "raised")) == 0 })
			if now := uint64(c.Time(ctx).Val().UnixMicro()); now <= fence {
				t.Errorf("the hash went at %d, before the clock passed the fence %d", now, fence)
			}
			req.Holder = "b"
			if res := mustAcquire(t, s, req, true); res.Fence <= fence {
				t.Errorf("after the hash went, fence %d, want above %d", res.Fence, fence)
			}
		})
	}
}

// TestExpiredLeaseLeavesNothingWithinItsBound: a lease never released (its holder died) leaves
// its lease key for as long again as its TTL (a second at least) past the grant, no longer: the
// key's PTTL says so, and the key is gone by then.
func TestExpiredLeaseLeavesNothingWithinItsBound(t *testing.T) {
	testenv.SkipShort(t, "waits for keys to expire by the server clock")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			for _, ttl := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond} {
				t.Run(ttl.String(), func(t *testing.T) {
					t.Parallel()
					key := fmt.Sprint("crashed:", ttl)
					bound := ttl + max(ttl, time.Second)
					start := time.Now()
					mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "dead", Permits: 1, Limit: 1, TTL: ttl}, true)
					// A lone lease's string lives its TTL from the grant; a lease hash longer. The
					// server counts in whole ms: its expiry is its clock's ms at the grant plus
					// the TTL, up to a ms before the grant's instant plus the TTL.
					if p, least := pttl(t, c, key, 0), ttl-time.Since(start)-time.Millisecond; p < least || p > bound {
						t.Errorf("lease key PTTL %v, want in [%v, %v]", p, least, bound)
					}
					poll.Until(t, "the dead holder's key to expire", func() bool { return len(keysMatching(t, c, key)) == 0 })
					// The PTTL above is the bound; the slack is for a stalled machine's polls and
					// the server's expiry cycle under the race detector's load.
					if d := time.Since(start); d > bound+10*time.Second {
						t.Errorf("the key went after %v, want within %v", d, bound)
					}
				})
			}
		})
	}
}

// TestDeadWaitersPlacesGoWithTheLine: on miniredis, whose clock the test moves: a holder of a
// minute's lease and two waiters, each waiting a hundred years, all die (nobody releases, leaves
// or tries again). The line's keys and the lease hash go a few minutes on (twice the minute past
// the lease, then as long again for the hash), not after the waits.
func TestDeadWaitersPlacesGoWithTheLine(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	s, c := redisharness.GoRedis(t, m.Addr()), raw(t, m.Addr())
	const forever = 100 * 365 * 24 * time.Hour
	mustAcquire(t, s, core.AcquireRequest{Key: "dead", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
	for _, h := range []string{"w1", "w2"} {
		mustAcquire(t, s, core.AcquireRequest{Key: "dead", Holder: h, Permits: 1, Limit: 1, TTL: time.Minute, Wait: forever}, false)
	}
	line := pttl(t, c, "dead", 1)
	if line < 2*time.Minute || line > 4*time.Minute {
		t.Errorf("queue PTTL %v, want in [2m, 4m]: twice a minute past the lease's minute", line)
	}
	if hash := pttl(t, c, "dead", 0); hash < line || hash > 2*line {
		t.Errorf("lease hash PTTL %v, want in [%v, %v]", hash, line, 2*line)
	}
	d := 10 * time.Minute
	m.SetTime(now.Add(d))
	m.FastForward(d)
	if keys := keysMatching(t, c, "dead"); len(keys) != 0 {
		t.Errorf("%v on: keys %q left", d, keys)
	}
}

// TestLiveWaiterKeepsItsPlaceBehindALongLease: on miniredis: a waiter behind a lease of an hour
// keeps its place while it lasts (the line lives a minute past the lease), and each try it makes
// when the lease it waits for would expire (extended meanwhile) keeps the line alive past the
// new expiry: the holder's release an hour and a half on grants it the lease from the line.
func TestLiveWaiterKeepsItsPlaceBehindALongLease(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	s := redisharness.GoRedis(t, m.Addr())
	ctx := context.Background()
	req := func(holder string, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: "long", Holder: holder, Permits: 1, Limit: 1, TTL: time.Hour, Wait: wait}
	}
	a := mustAcquire(t, s, req("a", 0), true)
	res := mustAcquire(t, s, req("w", 24*time.Hour), false)
	step := func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	}
	step(res.RetryAfter - time.Second) // a second before a's lease would expire, a extends it
	if _, err := s.Extend(ctx, core.ExtendRequest{Key: "long", Holder: "a", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	step(2 * time.Second) // w tries when a's lease was to expire: refused, it keeps its place
	mustAcquire(t, s, req("w", 24*time.Hour), false)
	step(30 * time.Minute)
	if _, err := s.Release(ctx, core.ReleaseRequest{Key: "long", Holder: "a", Fence: a.Fence}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Inspect(ctx, "long")
	if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "w" {
		t.Errorf("after a's release an hour and a half on: %+v, %v; want w's grant from the line", snap, err)
	}
}

// TestShortGrantDoesNotShortenTheLeaseKeys: a grant with a short TTL beside a lease with a long
// one leaves the lease hash living as long as the long lease.
func TestShortGrantDoesNotShortenTheLeaseKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s, c := redisharness.GoRedis(t, srv.Addr), raw(t, srv.Addr)
	req := func(holder string, ttl time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: "short", Holder: holder, Permits: 1, Limit: 2, TTL: ttl}
	}
	mustAcquire(t, s, req("long", time.Hour), true)
	mustAcquire(t, s, req("short", time.Second), true)
	if p := pttl(t, c, "short", 0); p < 59*time.Minute {
		t.Errorf("%s PTTL %v after a short grant beside an hour's lease, want about an hour", rediscore.Keys("short")[0], p)
	}
}

// TestNewKeyFastPathKeepsTheHash: through each driver on a real server, a new key's
// first grant of a semaphore (a Mutex's is a lone lease: see lone_test.go) leaves a lease hash whose keep and PTTL are twice the lease's TTL; its release
// deletes the hash; a hash of counters alone near the end of its keep (as one kept for a fence
// above the clock) gets both renewed by the next grant, keeping its fence counter (the next
// fence above the last); once the hash is gone, fences still rise (the server clock carries
// them); a semaphore's grant on a new key records its limit, which the next grant counts.
func TestNewKeyFastPathKeepsTheHash(t *testing.T) {
	t.Parallel()
	eachDriverAlone(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
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
		req := core.AcquireRequest{Key: "newkey", Holder: "h", Permits: 1, Limit: 2, TTL: ttl}
		r1 := mustAcquire(t, s, req, true)
		checkKept(req.Key, "new key")
		if cs := countersOf(t, c, req.Key); cs.fence != r1.Fence || cs.limit != 2 {
			t.Errorf("new key: counters %+v, want fence %d, limit 2", cs, r1.Fence)
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
		if err := c.HSet(ctx, k, rediscore.KeepField, int64(serverMs())+short, "fence", r1.Fence, "limit", 2).Err(); err != nil {
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

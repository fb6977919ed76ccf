package rediscore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
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
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	for _, pair := range [][2]string{{"goredis", "valkey"}, {"valkey", "goredis"}} {
		for _, woken := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/%s/woken=%v", pair[0], pair[1], woken), func(t *testing.T) {
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
					pollUntil(t, w.settled) // in line, and its subscription confirmed
				} else {
					pollUntil(t, func() bool { return w.registered() > 0 })
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
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
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
			pollUntil(t, func() bool { return len(keysMatching(t, c, "raised")) == 0 })
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
// its lease hash for as long again as its TTL (a second at least) past the grant, no longer: the
// hash's PTTL says so, and the key is gone by then.
func TestExpiredLeaseLeavesNothingWithinItsBound(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			for _, ttl := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond} {
				key := fmt.Sprint("crashed:", ttl)
				bound := ttl + max(ttl, time.Second)
				start := time.Now()
				mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "dead", Permits: 1, Limit: 1, TTL: ttl}, true)
				if p := pttl(t, c, key, 0); p < ttl || p > bound {
					t.Errorf("TTL %v: lease hash PTTL %v, want in [%v, %v]", ttl, p, ttl, bound)
				}
				pollUntil(t, func() bool { return len(keysMatching(t, c, key)) == 0 })
				if d := time.Since(start); d > bound+time.Second {
					t.Errorf("TTL %v: the key went after %v, want within %v", ttl, d, bound)
				}
			}
		})
	}
}

// TestDeadWaitersPlacesGoWithTheLine: on miniredis, whose clock the test moves: a holder of a
// minute's lease and two waiters, each waiting a hundred years, all die (nobody releases, leaves
// or tries again). The line's keys and the lease hash go a few minutes on (twice the minute past
// the lease, then as long again for the hash), not after the waits.
func TestDeadWaitersPlacesGoWithTheLine(t *testing.T) {
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

// TestLeftTryOutlivesItsKeyGoingIdle: a waiter's leave names a try of it still on its way; then
// the key's last lease is released, which leaves nobody holding or waiting for it. The lease hash
// must stay while the left try's record lives (deleting it would delete the record): the late
// try then arrives and takes neither the free key nor a place. No call deletes the hash after
// that: it expires by its keep, as long again as what it recorded needed (here 2 s at most: the
// line's second, for a wait of half a second).
func TestLeftTryOutlivesItsKeyGoingIdle(t *testing.T) {
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const key = "idle-left"
	const hold, wait, ttl = 400 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second
	acq := func(holder, try string, wait time.Duration) []any {
		return script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, ttl, wait, "ch", false, try, "")...).([]any)
	}
	a := acq("a", "", 0)
	if a[0].(int64) != 1 {
		t.Fatalf("a: %v", a)
	}
	if r := acq("w", "t0", wait); r[0].(int64) != 0 {
		t.Fatalf("w's first try = %v; want refused with a place", r)
	}
	script(t, c, srcLeave, key, "w", a[1], "t1", hold.Milliseconds())
	if r := script(t, c, srcRelease, key, "a", a[1]).([]any); r[0].(int64) != 1 || len(r) != 1 {
		t.Fatalf("release = %v; want 1 permit freed and nobody granted", r)
	}
	if keys := keysMatching(t, c, key); len(keys) == 0 {
		t.Fatal("the idle key's hash went with the left try's record")
	}
	if r := acq("w", "t1", wait); r[0].(int64) != 0 {
		t.Fatalf("the left try, arriving late on the free key = %v; want refused", r)
	}
	if n := lineLen(t, srv.Addr, key); n != 0 {
		t.Fatalf("the left try took a place")
	}
	if h := holdersOf(t, c, key); len(h) != 0 {
		t.Fatalf("holders %q after the left try; want none", h)
	}
	if p := pttl(t, c, key, 0); p > 2*ttl {
		t.Errorf("lease hash PTTL %v, want at most %v", p, 2*ttl)
	}
	pollUntil(t, func() bool { return len(keysMatching(t, c, key)) == 0 })
	if r := acq("w", "t1", 0); r[0].(int64) != 1 {
		t.Errorf("a try of that id once the hold has passed = %v; want granted", r)
	}
}

// TestLeftTryKeepsAReleasedKeyOnlyAsLongAsItNeeds: a waiter behind an hour's lease gives up with
// a try of it on its way (its leave names the try, for a hold of 400 ms); then the holder
// releases. The key is held and waited for by nobody, so its lease hash lives on for the left
// try's record alone: as long again as that needs (a second at least), not as long as the
// hour's lease and the line had it kept.
func TestLeftTryKeepsAReleasedKeyOnlyAsLongAsItNeeds(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			const key = "left-released"
			const hold = 400 * time.Millisecond
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Hour, Wait: wait}
			}
			a := mustAcquire(t, s, req("a", 0), true)
			mustAcquire(t, s, req("w", time.Hour), false)
			script(t, c, srcLeave, key, "w", a.Fence, "t1", hold.Milliseconds())
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: a.Fence}); !ok || err != nil {
				t.Fatalf("Release = %v, %v", ok, err)
			}
			if p, most := pttl(t, c, key, 0), hold+time.Second; p <= 0 || p > most {
				t.Errorf("after the last release, with a left try: lease hash PTTL %v, want at most %v", p, most)
			}
			pollUntil(t, func() bool { return len(keysMatching(t, c, key)) == 0 })
		})
	}
}

package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestLoneLeaseFencesGrowAcrossReleasesAndFloors: Stores of both drivers on one key take turns
// with lone leases, released and taken again at once, re-acquired by their holder, raised by
// RaiseFence, granted by AcquireAbove with floors at, below and just above the last fence and the
// clock, and a second holder's refused try between: every grant's fence is above every earlier
// one, a re-acquire keeps its fence (or raises it to its floor), and the key leaves nothing once
// the clock has passed the last fence.
func TestLoneLeaseFencesGrowAcrossReleasesAndFloors(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	type raiser interface {
		redisharness.Store
		core.FenceRaiser
	}
	stores := []raiser{redisharness.GoRedis(t, srv.Addr).(raiser), redisharness.Valkey(t, srv.Addr).(raiser)}
	const key = "fences"
	req := func(h string) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: h, Permits: 1, Limit: 1, TTL: time.Minute}
	}
	var last uint64
	grant := func(i int, f core.AcquireResult, err error, how string) uint64 {
		t.Helper()
		if err != nil || !f.Granted || f.Fence <= last {
			t.Fatalf("cycle %d, %s: %+v, %v; want a grant above the last fence %d", i, how, f, err, last)
		}
		last = f.Fence
		return f.Fence
	}
	for i := range 200 {
		s, other := stores[i%2], stores[(i+1)%2]
		h := "h" + string(rune('a'+i%2))
		var f uint64
		switch i % 5 {
		case 0:
			r, err := s.Acquire(ctx, req(h))
			f = grant(i, r, err, "Acquire")
		case 1:
			r, err := s.AcquireAbove(ctx, req(h), last)
			f = grant(i, r, err, "AcquireAbove the last fence")
		case 2:
			r, err := s.AcquireAbove(ctx, req(h), uint64(time.Now().Add(-time.Second).UnixMicro()))
			f = grant(i, r, err, "AcquireAbove a floor below the clock")
		case 3:
			floor := uint64(time.Now().Add(2 * time.Millisecond).UnixMicro())
			r, err := s.AcquireAbove(ctx, req(h), floor)
			f = grant(i, r, err, "AcquireAbove a floor above the clock")
			if f < floor {
				t.Fatalf("cycle %d: fence %d below its floor %d", i, f, floor)
			}
		case 4:
			r, err := s.Acquire(ctx, req(h))
			f = grant(i, r, err, "Acquire")
			if r, err := other.Acquire(ctx, req("intruder")); err != nil || r.Granted {
				t.Fatalf("cycle %d: a second holder's try on a held key: %+v, %v", i, r, err)
			}
		}
		if r, err := other.Acquire(ctx, req(h)); err != nil || !r.Granted || r.Fence != f {
			t.Fatalf("cycle %d: the holder's re-acquire through the other driver: %+v, %v; want its fence %d", i, r, err, f)
		}
		if i%3 == 0 {
			raised := f + 5
			r, err := s.RaiseFence(ctx, req(h), raised)
			if err != nil || !r.Granted || r.Fence != raised {
				t.Fatalf("cycle %d: RaiseFence to %d: %+v, %v", i, raised, r, err)
			}
			last, f = raised, raised
		}
		if ok, err := other.Release(ctx, core.ReleaseRequest{Key: key, Holder: h, Fence: f}); !ok || err != nil {
			t.Fatalf("cycle %d: Release at fence %d: %v, %v", i, f, ok, err)
		}
		if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: h, Fence: f}); ok || err != nil {
			t.Fatalf("cycle %d: a second Release (a resent one): %v, %v; want nothing released", i, ok, err)
		}
	}
	poll.Until(t, "the key to leave nothing once the clock passes its last fence", func() bool { return len(c.Keys(ctx, "*").Val()) == 0 })
}

// TestLoneLeaseFencesGrowUnderAFrozenClock: on miniredis, whose clock the test holds still, a
// lone lease's release cannot delete its fence (the clock is not past it), so the key keeps it in
// the hash: grants, releases and re-acquires give fences that only grow, and a lease that expires
// while the clock is held, then the clock moved past its expiry, leaves a fence below the next.
func TestLoneLeaseFencesGrowUnderAFrozenClock(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	ctx := context.Background()
	stores := []redisharness.Store{redisharness.GoRedis(t, m.Addr()), redisharness.Valkey(t, m.Addr())}
	var last uint64
	for i := range 30 {
		s := stores[i%2]
		r, err := s.Acquire(ctx, core.AcquireRequest{Key: "frozen", Holder: "h", Permits: 1, Limit: 1, TTL: time.Second})
		if err != nil || !r.Granted || r.Fence <= last {
			t.Fatalf("grant %d: %+v, %v; want a fence above %d", i, r, err, last)
		}
		last = r.Fence
		switch i % 3 {
		case 0:
			if ok, err := stores[(i+1)%2].Release(ctx, core.ReleaseRequest{Key: "frozen", Holder: "h", Fence: r.Fence}); !ok || err != nil {
				t.Fatalf("release %d: %v, %v", i, ok, err)
			}
		case 1:
			now = now.Add(1001 * time.Millisecond) // the lease expires, and the clock moves with it
			m.SetTime(now)
			m.FastForward(1001 * time.Millisecond)
		case 2:
			if r, err := s.Acquire(ctx, core.AcquireRequest{Key: "frozen", Holder: "x", Permits: 1, Limit: 1, TTL: time.Second}); err != nil || r.Granted {
				t.Fatalf("a second holder's try %d: %+v, %v", i, r, err)
			}
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "frozen", Holder: "h"}); !ok || err != nil {
				t.Fatalf("release %d: %v, %v", i, ok, err)
			}
		}
	}
}

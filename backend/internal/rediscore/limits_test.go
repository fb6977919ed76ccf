package rediscore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// TestLongestTTLAndLargestLimitOnRedis: a lease of core.MaxDuration stays held (no overflow
// into a negative expiry that would drop the keys), and a line on a key of limit core.MaxLimit
// keeps its waiters' requests readable: a release grants the head.
func TestLongestTTLAndLargestLimitOnRedis(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			long, err := primitives.NewMutex(s, "forever", primitives.WithTTL(core.MaxDuration))
			if err != nil {
				t.Fatal(err)
			}
			l, err := long.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := long.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
				t.Fatalf("a second TryAcquire beside a lease of MaxDuration: %v, want ErrNotAcquired", err)
			}
			if snap, _ := long.Inspect(ctx); len(snap.Leases) != 1 || snap.Leases[0].TTL < core.MaxDuration-time.Hour {
				t.Fatalf("the store holds %+v, want one lease with about MaxDuration left", snap.Leases)
			}
			if _, err := l.Extend(ctx, core.MaxDuration); err != nil {
				t.Fatalf("Extend by MaxDuration: %v", err)
			}
			if _, err := l.Extend(ctx, core.MaxDuration+1); !errors.Is(err, core.ErrInvalid) {
				t.Fatalf("Extend beyond MaxDuration: %v, want ErrInvalid", err)
			}
			l.Release(ctx)

			req := func(holder string, n int) core.AcquireRequest {
				return core.AcquireRequest{Key: "huge", Holder: holder, Permits: n, Limit: core.MaxLimit, TTL: core.MaxDuration, Wait: core.MaxDuration}
			}
			mustAcquire(t, s, req("a", core.MaxLimit), true)
			mustAcquire(t, s, req("b", core.MaxLimit-1), false)
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "huge", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			if snap, _ := s.Inspect(ctx, "huge"); len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" || snap.Leases[0].Permits != core.MaxLimit-1 {
				t.Fatalf("after the release, leases %+v, want b's grant from the line of %d permits", snap.Leases, core.MaxLimit-1)
			}
		})
	}
}

// TestAttemptsAreSpacedByRetryIntervalOnRedis: WithAttempts(3) while another holds for a
// minute gives up after about two retry intervals, having tried the store 3 times, although the
// waiter's notifications are reliable.
func TestAttemptsAreSpacedByRetryIntervalOnRedis(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			ctx := context.Background()
			holder, _ := primitives.NewMutex(mk(t, srv.Addr), "attempts", primitives.WithTTL(time.Minute))
			l, err := holder.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			s := &tries{Store: mk(t, srv.Addr)}
			m, _ := primitives.NewMutex(s, "attempts", primitives.WithTTL(time.Minute), primitives.WithAttempts(3),
				primitives.WithRetryInterval(20*time.Millisecond), primitives.WithAcquireTimeout(time.Minute))
			start := time.Now()
			if _, err := m.Acquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
				t.Fatalf("Acquire with 3 attempts beside a holder: %v, want ErrNotAcquired", err)
			}
			took := time.Since(start)
			t.Logf("3 attempts, retry interval 20ms: gave up after %v", took)
			if took < 40*time.Millisecond || took > 10*time.Second {
				t.Errorf("3 attempts took %v, want 2 retry intervals (40ms) or a little more, not less nor the holder's TTL", took)
			}
			if n := s.n.Load(); n != 3 {
				t.Errorf("3 attempts made %d tries", n)
			}
		})
	}
}

// tries is a Store that counts the Acquire calls it passes on; it keeps the Notifier.
type tries struct {
	redisharness.Store
	n atomic.Int64
}

func (s *tries) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	s.n.Add(1)
	return s.Store.Acquire(ctx, req)
}

// TestFenceFloorBeyondExactRangeOnRedis: a fence floor the scripts cannot count exactly (Lua
// numbers are doubles: above 2^53 a floor rounds down, and last + 1 rounds back to last) is
// refused with core.ErrInvalid and changes nothing, rather than granted below the floor and
// then granted again at the same fence to another holder.
func TestFenceFloorBeyondExactRangeOnRedis(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			fr := s.(core.FenceRaiser)
			ctx := context.Background()
			req := func(key, holder string) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 2, TTL: time.Minute}
			}
			for _, floor := range []uint64{1<<53 + 1, 1<<63 + 1, ^uint64(0)} {
				for op, call := range map[string]func(core.AcquireRequest, uint64) (core.AcquireResult, error){
					"AcquireAbove": func(r core.AcquireRequest, f uint64) (core.AcquireResult, error) { return fr.AcquireAbove(ctx, r, f) },
					"RaiseFence":   func(r core.AcquireRequest, f uint64) (core.AcquireResult, error) { return fr.RaiseFence(ctx, r, f) },
				} {
					key := "floor-" + op + "-" + time.Now().Format("150405.000000000")
					res, err := call(req(key, "a"), floor)
					switch {
					case err == nil && res.Granted && res.Fence >= floor:
						// Honoured exactly: then the next grant must be above it.
						if next := mustAcquire(t, s, req(key, "b"), true); next.Fence <= res.Fence {
							t.Errorf("%s(floor %d) granted fence %d, and the next grant fence %d: not above it", op, floor, res.Fence, next.Fence)
						}
					case errors.Is(err, core.ErrInvalid):
						if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 0 {
							t.Errorf("%s(floor %d) refused as invalid, but the key holds %+v, %v", op, floor, snap.Leases, err)
						}
					default:
						t.Errorf("%s(floor %d): %+v, %v; want a fence of at least the floor, or ErrInvalid", op, floor, res, err)
					}
				}
			}
			// A held lease is not raised past the exact range either.
			held := mustAcquire(t, s, req("floor-held", "h"), true)
			if res, err := fr.RaiseFence(ctx, req("floor-held", "h"), 1<<53+1); err == nil && res.Fence < 1<<53+1 {
				t.Errorf("RaiseFence of a held lease (fence %d) to 2^53+1: %+v, want ErrInvalid or the fence", held.Fence, res)
			}
		})
	}
}

package memory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func TestNextFence(t *testing.T) {
	now := time.UnixMicro(1_000_000)
	tests := []struct {
		last uint64
		now  time.Time
		want uint64
	}{
		{0, now, 1_000_000},         // a fresh key starts at the clock
		{1_000_000, now, 1_000_001}, // two grants in one microsecond
		{5_000_000, now, 5_000_001}, // the clock went back: the counter carries the order
		{7, time.Unix(0, 0), 8},     // no usable clock
		{7, time.UnixMicro(-5), 8},  // before the epoch
		{999_999, now.Add(time.Second), 2_000_000},
	}
	for _, tc := range tests {
		if got := nextFence(tc.last, tc.now); got != tc.want {
			t.Errorf("NextFence(%d, %d µs) = %d, want %d", tc.last, tc.now.UnixMicro(), got, tc.want)
		}
	}
}

// TestFenceFloorNearTheTopOfTheRange: a floor so high that the fences after it would wrap past
// 2^64 − 1 (and start again below it) is refused with core.ErrInvalid and changes nothing; a
// floor the counter can go on from is honoured, and the next grant is above it.
func TestFenceFloorNearTheTopOfTheRange(t *testing.T) {
	ctx := context.Background()
	s := New()
	req := func(key, holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 2, TTL: time.Minute}
	}
	for _, floor := range []uint64{math.MaxUint64, math.MaxUint64 - 1} {
		for op, call := range map[string]func(core.AcquireRequest, uint64) (core.AcquireResult, error){
			"AcquireAbove": func(r core.AcquireRequest, f uint64) (core.AcquireResult, error) { return s.AcquireAbove(ctx, r, f) },
			"RaiseFence":   func(r core.AcquireRequest, f uint64) (core.AcquireResult, error) { return s.RaiseFence(ctx, r, f) },
		} {
			key := fmt.Sprint(op, floor)
			res, err := call(req(key, "a"), floor)
			switch {
			case err == nil && res.Granted && res.Fence >= floor:
				next, err := s.Acquire(ctx, req(key, "b"))
				if err != nil || !next.Granted || next.Fence <= res.Fence {
					t.Errorf("%s(floor %d) granted fence %d, then the next grant %+v, %v: not above it", op, floor, res.Fence, next, err)
				}
			case errors.Is(err, core.ErrInvalid):
				if snap, _ := s.Inspect(ctx, key); len(snap.Leases) != 0 {
					t.Errorf("%s(floor %d) refused as invalid, but the key holds %+v", op, floor, snap.Leases)
				}
			default:
				t.Errorf("%s(floor %d): %+v, %v; want a fence of at least the floor, or ErrInvalid", op, floor, res, err)
			}
		}
	}
	f := uint64(1) << 62
	if res, err := s.AcquireAbove(ctx, req("high", "a"), f); err != nil || res.Fence != f {
		t.Errorf("AcquireAbove(2^62): %+v, %v; want granted at the floor", res, err)
	}
}

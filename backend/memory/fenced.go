package memory

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/leasehold/leasehold/core"
)

// fenceRecords are the highest fences accepted for each resource by Fenced; mu serializes the
// fenced writes of a Store.
type fenceRecords struct {
	mu      sync.Mutex
	highest map[string]uint64
}

// Fenced runs fn only if fence (a lease's Fence) is at least the highest fence accepted for
// resource before, and then records fence as the highest: the in-process counterpart of
// goredis.Store.Fenced and postgres.Store.AcceptFence, for unit tests of code that fences its
// writes. A lower fence returns an error wrapping core.ErrStaleFence and core.ErrLost, and fn does
// not run; equal fences pass. An error fn returns is returned as it is, and the fence is not
// recorded (fn's writes are fn's to undo). Fenced writes of one Store run one at a time, so fn
// must not call Fenced on the same Store. A fence of 0 or above 2^63 − 1 (the range the Redis and
// PostgreSQL stores take), or a nil fn, is core.ErrInvalid. The
// records live as long as the Store.
func (s *Store) Fenced(ctx context.Context, resource string, fence uint64, fn func() error) error {
	switch {
	case fn == nil:
		return fmt.Errorf("memory: fenced write to %q: %w: fn: must not be nil", resource, core.ErrInvalid)
	case fence == 0 || fence > math.MaxInt64:
		return fmt.Errorf("memory: fenced write to %q: %w: fence %d: must be between 1 and 2^63 − 1", resource, core.ErrInvalid, fence)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &s.fences
	r.mu.Lock()
	defer r.mu.Unlock()
	if highest := r.highest[resource]; fence < highest {
		return fmt.Errorf("memory: fenced write to %q: %w: %w: fence %d is below %d, accepted already",
			resource, core.ErrStaleFence, core.ErrLost, fence, highest)
	}
	if err := fn(); err != nil {
		return err
	}
	if r.highest == nil {
		r.highest = make(map[string]uint64)
	}
	r.highest[resource] = fence
	return nil
}

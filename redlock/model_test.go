package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/core"
)

// TestFencesIncreaseUnderNodeFailures drives acquires and releases on one key while nodes go
// down, come back and restart empty at random, and checks that every grant's fence is above
// every earlier grant's, and that grants never overlap.
func TestFencesIncreaseUnderNodeFailures(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.SampledFrom([]int{3, 5}).Draw(rt, "nodes")
		clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		ns, ss := nodes(clock, n)
		s := mustNew(rt, ss)
		ctx := context.Background()
		var last uint64
		holder := ""
		for step := range rapid.IntRange(10, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 4).Draw(rt, "action") {
			case 0: // a node goes down or comes back
				i := rapid.IntRange(0, n-1).Draw(rt, "node")
				ns[i].set(rapid.Bool().Draw(rt, "down"), 0)
			case 1: // a node restarts empty; restarts take time, and the clock moves on
				ns[rapid.IntRange(0, n-1).Draw(rt, "node")].wipe()
				clock.Advance(time.Millisecond)
			case 2, 3: // someone tries to take the lock
				h := fmt.Sprint("h", step)
				res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: h, Permits: 1, Limit: 1, TTL: time.Minute})
				if err != nil || !res.Granted {
					continue
				}
				if holder != "" {
					// Granted while another holds it: legal only if that lease is gone from a
					// majority (restarts without persistence can do that), never silently.
					snap, _ := s.Inspect(ctx, "k")
					for _, l := range snap.Leases {
						if l.Holder == holder {
							rt.Fatalf("step %d: %s granted while %s still holds a majority", step, h, holder)
						}
					}
				}
				if res.Fence <= last {
					rt.Fatalf("step %d: fence %d is not above the previous grant's %d", step, res.Fence, last)
				}
				last, holder = res.Fence, h
			case 4: // the holder releases
				if holder != "" {
					s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: holder})
					holder = ""
				}
			}
		}
	})
}

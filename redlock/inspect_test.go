package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/redlock"
)

// TestInspectWaitsForASlowNodeOfADelayedLeasesQuorum: a lease of two permits of four needs all
// three nodes; once it expires into its lock delay, Inspect with one node slower than the others
// waits for that node's answer and reports the delay (it decided on the two fast nodes, which
// are not a quorum of the delay, and reported none).
func TestInspectWaitsForASlowNodeOfADelayedLeasesQuorum(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ns, ss := nodes(clock, 3)
	s := mustNew(t, ss, redlock.WithNodeTimeout(2*time.Second))
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 2, Limit: 4, TTL: time.Second, LockDelay: 5 * time.Second}
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	for i, n := range ns { // a node slower than the round's grace answers after Acquire returns
		poll.Until(t, fmt.Sprintf("node %d grants", i), func() bool {
			snap, err := n.Inspect(ctx, "k")
			return err == nil && len(snap.Leases) == 1
		})
	}
	clock.Advance(2 * time.Second)
	ns[2].set(false, 50*time.Millisecond)
	snap, err := s.Inspect(ctx, "k")
	if err != nil || len(snap.Leases) != 0 || len(snap.Delayed) != 1 || snap.Delayed[0].Holder != "a" || snap.Delayed[0].Left != 4*time.Second {
		t.Errorf("Inspect in the lock delay, one node slow: %+v %v; want a's lease closed for 4s more", snap, err)
	}
}

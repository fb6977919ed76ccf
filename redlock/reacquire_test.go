package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

// TestReacquireKeepsTheFenceOfAQuorum: nodes that missed the holder's grant (down, or slower
// than the round's grace) grant a re-acquire afresh, at a later floor than the lease's fence.
// The lease is still held by a quorum at its fence: the re-acquire returns that fence, leaves it
// on those nodes, and gives back the fresh grants.
func TestReacquireKeepsTheFenceOfAQuorum(t *testing.T) {
	ns, ss := nodes(core.SystemClock{}, 5)
	s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second))
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	ns[3].set(true, 0)
	ns[4].set(true, 0)
	first, err := s.Acquire(ctx, req)
	if err != nil || !first.Granted {
		t.Fatalf("acquire with two nodes down: %+v %v", first, err)
	}
	ns[3].set(false, 0)
	ns[4].set(false, 0)
	again, err := s.Acquire(ctx, req)
	if err != nil || !again.Granted {
		t.Fatalf("re-acquire: %+v %v", again, err)
	}
	if again.Fence != first.Fence {
		t.Errorf("re-acquire by the holder: fence %d, want the lease's own %d", again.Fence, first.Fence)
	}
	for i, n := range ns {
		snap, err := n.Inspect(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		want := i < 3
		if held := len(snap.Leases) == 1 && snap.Leases[0].Fence == first.Fence; held != want || len(snap.Leases) > 1 {
			t.Errorf("node %d: leases %+v; want a's lease at fence %d: %v", i, snap.Leases, first.Fence, want)
		}
	}
}

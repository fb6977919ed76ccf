package redlock_test

import (
	"errors"
	"slices"

	"pgregory.net/rapid"

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
	first := grantWithTwoNodesDown(t, s, ns[3:], req)
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

// grantWithTwoNodesDown acquires req through s while the nodes down are down, and brings them
// back: the lease is on the other nodes only.
func grantWithTwoNodesDown(t *testing.T, s core.Store, down []*node, req core.AcquireRequest) core.AcquireResult {
	t.Helper()
	for _, n := range down {
		n.set(true, 0)
	}
	res, err := s.Acquire(context.Background(), req)
	if err != nil || !res.Granted {
		t.Fatalf("acquire with %d nodes down: %+v %v", len(down), res, err)
	}
	for _, n := range down {
		n.set(false, 0)
	}
	return res
}

// TestReacquireAgreesWithExtendAndInspectUnderNodeFailures drives acquires (re-acquires by a
// holder among them), extends and releases on a mutex or a semaphore while nodes go down and come
// back or slow down (their answers then come after the outcome is decided), and checks that a re-acquire returns the fence its holder was told or a fence above every
// fence returned before, that a new holder's fence is above every earlier one, that Extend and
// Inspect report the fence Acquire returned, and that a mutex never has two holders told they
// hold it.
func TestReacquireAgreesWithExtendAndInspectUnderNodeFailures(t *testing.T) {
	t.Parallel() // its slow nodes' delays are real time
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.SampledFrom([]int{3, 5}).Draw(rt, "nodes")
		limit := rapid.SampledFrom([]int{1, 2, core.MaxLimit}).Draw(rt, "limit")
		clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		ns, ss := nodes(clock, n)
		s := mustNew(rt, ss, redlock.WithNodeTimeout(time.Second))
		ctx := context.Background()
		held := map[string]uint64{} // what each holder was told, while it holds
		// A refused or failed re-acquire releases the holder on the nodes that granted (see
		// Acquire): the lease may be gone, or left on a quorum at the fence the holder was told.
		maybe := map[string]uint64{}
		var highest uint64
		for step := range rapid.IntRange(5, 40).Draw(rt, "steps") {
			h := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "holder")
			switch rapid.IntRange(0, 4).Draw(rt, "action") {
			case 0: // a node goes down, comes back, or answers slower than the others' grace
				delay := time.Duration(rapid.SampledFrom([]int{0, 0, 4}).Draw(rt, "delay/ms")) * time.Millisecond
				ns[rapid.IntRange(0, n-1).Draw(rt, "node")].set(rapid.Bool().Draw(rt, "down"), delay)
			case 1, 2:
				res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: h, Permits: 1, Limit: limit, TTL: time.Minute})
				if err != nil || !res.Granted {
					if f, ok := held[h]; ok {
						delete(held, h)
						maybe[h] = f
					}
					continue
				}
				f0, ok := held[h]
				if !ok {
					f0, ok = maybe[h]
				}
				delete(maybe, h)
				if ok && res.Fence != f0 && res.Fence <= highest {
					rt.Fatalf("step %d: re-acquire by %s at fence %d: neither its own %d nor above every earlier fence %d", step, h, res.Fence, f0, highest)
				} else if !ok && res.Fence <= highest {
					rt.Fatalf("step %d: %s granted fence %d, not above the earlier %d", step, h, res.Fence, highest)
				}
				if limit == 1 {
					for o := range held {
						if o != h {
							rt.Fatalf("step %d: %s granted while %s holds the mutex", step, h, o)
						}
					}
				}
				held[h] = res.Fence
				highest = max(highest, res.Fence)
				// A straggler of this holder's earlier call (a release, a give-back) may land after
				// the grant, on a slow node or a loaded machine, and take it from a node of its
				// quorum: Extend then reports the loss. What it reports otherwise is the fence.
				ext, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: h, TTL: time.Minute})
				if errors.Is(err, core.ErrLost) {
					delete(held, h)
					maybe[h] = res.Fence
					continue
				}
				if err != nil || ext.Fence != res.Fence {
					rt.Fatalf("step %d: %s's Extend right after its grant at %d: %+v %v", step, h, res.Fence, ext, err)
				}
				snap, err := s.Inspect(ctx, "k")
				if err != nil {
					rt.Fatalf("step %d: Inspect right after a grant: %v", step, err)
				}
				if l := slices.IndexFunc(snap.Leases, func(l core.LeaseInfo) bool { return l.Holder == h }); l >= 0 && snap.Leases[l].Fence != res.Fence {
					rt.Fatalf("step %d: Inspect %+v; want %s at fence %d", step, snap.Leases, h, res.Fence)
				}
			case 3:
				if f, ok := held[h]; ok {
					ext, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: h, TTL: time.Minute})
					if err == nil && ext.Fence != f {
						rt.Fatalf("step %d: %s's Extend at fence %d; it was granted %d", step, h, ext.Fence, f)
					}
					if errors.Is(err, core.ErrLost) {
						delete(held, h)
						maybe[h] = f
					}
				}
			case 4:
				if f, ok := held[h]; ok {
					// A release that no quorum confirms may leave the lease on a quorum: the holder
					// still holds it as far as the others are concerned.
					if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: h, Fence: f}); ok && err == nil {
						delete(held, h)
					} else {
						delete(held, h)
						maybe[h] = f
					}
				}
			}
		}
	})
}

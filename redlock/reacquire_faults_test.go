package redlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

var errReleaseFails = errors.New("release fails")

// releaseFails is a node whose Release fails, without effect, while fail is set.
type releaseFails struct {
	*node
	fail atomic.Bool
}

func (n *releaseFails) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if n.fail.Load() {
		return false, errReleaseFails
	}
	return n.node.Release(ctx, req)
}

// nodeLeases returns the leases node n holds on key.
func nodeLeases(t *testing.T, n core.Store, key string) []core.LeaseInfo {
	t.Helper()
	snap, err := n.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Leases
}

// TestReacquireWhoseGiveBackFailsLeavesStraysNobodyCounts: the re-acquire's give-back of the fresh
// grants of the two nodes that missed the lease fails. The re-acquire keeps the lease's fence;
// Inspect and Extend report that fence alone, Release of it ends the lease, another holder is
// then granted above it, and the strays end with their TTL, counted from the last Extend.
func TestReacquireWhoseGiveBackFailsLeavesStraysNobodyCounts(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ns, _ := nodes(clock, 5)
	rf := []*releaseFails{{node: ns[3]}, {node: ns[4]}}
	s := mustNew(t, []core.Store{ns[0], ns[1], ns[2], rf[0], rf[1]}, redlock.WithNodeTimeout(time.Second))
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	first := grantWithTwoNodesDown(t, s, ns[3:], req)
	rf[0].fail.Store(true)
	rf[1].fail.Store(true)
	again, err := s.Acquire(ctx, req)
	if err != nil || !again.Granted || again.Fence != first.Fence {
		t.Fatalf("re-acquire whose give-back fails: %+v %v; want granted at %d", again, err, first.Fence)
	}
	for _, i := range []int{3, 4} {
		if ls := nodeLeases(t, ns[i], "k"); len(ls) != 1 || ls[0].Fence <= first.Fence {
			t.Fatalf("node %d: %+v; want a's fresh grant above %d, left by the failed give-back", i, ls, first.Fence)
		}
	}
	snap, err := s.Inspect(ctx, "k")
	if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "a" || snap.Leases[0].Fence != first.Fence {
		t.Errorf("Inspect: %+v %v; want a's lease at %d alone", snap.Leases, err, first.Fence)
	}
	clock.Advance(30 * time.Second)
	ext, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute})
	if err != nil || ext.Fence != first.Fence {
		t.Errorf("Extend: %+v %v; want fence %d", ext, err, first.Fence)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: first.Fence}); !ok || err != nil {
		t.Errorf("Release at the lease's fence: %v %v; want held", ok, err)
	}
	if snap, err := s.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 0 {
		t.Errorf("Inspect after the release: %+v %v; want no lease: the strays are on no quorum", snap.Leases, err)
	}
	b, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Hour})
	if err != nil || !b.Granted || b.Fence <= first.Fence {
		t.Fatalf("b's acquire after a's release: %+v %v; want granted above %d", b, err, first.Fence)
	}
	// Extend renewed the strays (each node extends what it holds), so they last a TTL from it.
	clock.Advance(59 * time.Second)
	for _, i := range []int{3, 4} {
		if ls := nodeLeases(t, ns[i], "k"); len(ls) != 1 || ls[0].Holder != "a" {
			t.Errorf("node %d, 59 s after the Extend: %+v; want a's stray", i, ls)
		}
	}
	clock.Advance(2 * time.Second)
	for _, i := range []int{3, 4} {
		for _, l := range nodeLeases(t, ns[i], "k") {
			if l.Holder == "a" {
				t.Errorf("node %d, a TTL after the last Extend: a's stray %+v lasts", i, l)
			}
		}
	}
}

// TestReacquireOfASharedKeyKeepsItsFenceBesideLaterHolders: on a semaphore and on a
// shared-exclusive key, a holder whose lease missed a node re-acquires after another holder was
// granted a higher fence. It keeps its own fence beside that lease, Extend and Inspect agree, and
// a lease granted after both is above both.
func TestReacquireOfASharedKeyKeepsItsFenceBesideLaterHolders(t *testing.T) {
	for _, limit := range []int{2, core.MaxLimit} {
		ns, ss := nodes(core.SystemClock{}, 5)
		s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second))
		ctx := context.Background()
		req := func(h string, permits int) core.AcquireRequest {
			return core.AcquireRequest{Key: "k", Holder: h, Permits: permits, Limit: limit, TTL: time.Minute}
		}
		ns[4].set(true, 0)
		a, err := s.Acquire(ctx, req("a", 1))
		if err != nil || !a.Granted {
			t.Fatalf("limit %d: a: %+v %v", limit, a, err)
		}
		ns[4].set(false, 0)
		b, err := s.Acquire(ctx, req("b", 1))
		if err != nil || !b.Granted || b.Fence <= a.Fence {
			t.Fatalf("limit %d: b: %+v %v; want granted above %d", limit, b, err, a.Fence)
		}
		again, err := s.Acquire(ctx, req("a", 1))
		if err != nil || !again.Granted || again.Fence != a.Fence {
			t.Fatalf("limit %d: a's re-acquire: %+v %v; want its fence %d", limit, again, err, a.Fence)
		}
		if ext, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute}); err != nil || ext.Fence != a.Fence {
			t.Errorf("limit %d: a's Extend: %+v %v; want fence %d", limit, ext, err, a.Fence)
		}
		snap, err := s.Inspect(ctx, "k")
		if err != nil || len(snap.Leases) != 2 || snap.Leases[0].Holder != "a" || snap.Leases[0].Fence != a.Fence ||
			snap.Leases[1].Holder != "b" || snap.Leases[1].Fence != b.Fence {
			t.Errorf("limit %d: Inspect %+v %v; want a at %d and b at %d", limit, snap.Leases, err, a.Fence, b.Fence)
		}
		for _, h := range []string{"a", "b"} {
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: h}); !ok || err != nil {
				t.Fatalf("limit %d: release %s: %v %v", limit, h, ok, err)
			}
		}
		c, err := s.Acquire(ctx, req("c", limit))
		if err != nil || !c.Granted || c.Fence <= b.Fence {
			t.Errorf("limit %d: c, for every permit, after both released: %+v %v; want granted above %d", limit, c, err, b.Fence)
		}
	}
}

// TestReacquireAfterAWipeOrBesideACounterAheadKeepsFencesIncreasing: a holder's lease is on three
// of five nodes. When one of them restarts empty, the re-acquire finds no quorum at the lease's
// fence and moves the lease above it; when a node that missed the lease has its counter far
// ahead, the re-acquire keeps the lease's fence and gives that node's grant back. Either way
// Extend and Inspect report the fence returned, and the next holder's fence is above it.
func TestReacquireAfterAWipeOrBesideACounterAheadKeepsFencesIncreasing(t *testing.T) {
	for _, wipe := range []bool{true, false} {
		ns, ss := nodes(core.SystemClock{}, 5)
		s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second))
		ctx := context.Background()
		req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
		first := grantWithTwoNodesDown(t, s, ns[3:], req)
		ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
		if wipe {
			ns[2].wipe()
		} else {
			bump := core.AcquireRequest{Key: "k", Holder: "bump", Permits: 1, Limit: 1, TTL: time.Minute}
			if _, err := ns[3].AcquireAbove(ctx, bump, ahead); err != nil {
				t.Fatal(err)
			}
			if _, err := ns[3].Release(ctx, core.ReleaseRequest{Key: "k", Holder: "bump"}); err != nil {
				t.Fatal(err)
			}
		}
		again, err := s.Acquire(ctx, req)
		switch {
		case err != nil || !again.Granted:
			t.Fatalf("wipe %v: re-acquire: %+v %v", wipe, again, err)
		case wipe && again.Fence <= first.Fence:
			t.Errorf("re-acquire after a wipe left the lease on two nodes: fence %d, want above %d", again.Fence, first.Fence)
		case !wipe && again.Fence != first.Fence:
			t.Errorf("re-acquire beside a node ahead: fence %d, want the lease's %d", again.Fence, first.Fence)
		}
		if ext, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute}); err != nil || ext.Fence != again.Fence {
			t.Errorf("wipe %v: Extend %+v %v; want fence %d", wipe, ext, err, again.Fence)
		}
		if snap, err := s.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Fence != again.Fence {
			t.Errorf("wipe %v: Inspect %+v %v; want a at %d", wipe, snap.Leases, err, again.Fence)
		}
		if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: again.Fence}); !ok || err != nil {
			t.Fatalf("wipe %v: release: %v %v", wipe, ok, err)
		}
		b, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !b.Granted || b.Fence <= again.Fence {
			t.Errorf("wipe %v: next holder: %+v %v; want granted above %d", wipe, b, err, again.Fence)
		}
	}
}

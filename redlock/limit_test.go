package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/redlock"
)

// TestNodesOfAnotherLimitRefuseTheQuorum: a quorum of nodes holding the key under another
// limit (leases the Redlock never saw whole) is enough for the acquire to fail with their
// ErrLimitMismatch, and the grant the other node made for it is given back: nothing of the
// call is left on any node.
func TestNodesOfAnotherLimitRefuseTheQuorum(t *testing.T) {
	ctx := context.Background()
	nodes := []*memory.Store{memory.New(), memory.New(), memory.New()}
	s := mustNew(t, []core.Store{nodes[0], nodes[1], nodes[2]})
	for _, n := range nodes[1:] {
		if res, err := n.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "stray", Permits: 1, Limit: 3, TTL: time.Minute}); err != nil || !res.Granted {
			t.Fatalf("stray lease: %+v, %v", res, err)
		}
	}
	_, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true})
	var lm *core.LimitMismatchError
	if !errors.As(err, &lm) || lm.Held != 3 || lm.Requested != 1 {
		t.Fatalf("Acquire of limit 1 with two of three nodes held under limit 3: %v, want a *core.LimitMismatchError naming 3 and 1", err)
	}
	for i, n := range nodes {
		snap, err := n.Inspect(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range snap.Leases {
			if l.Holder == "a" {
				t.Errorf("node %d keeps a lease of the refused acquire: %+v", i, l)
			}
		}
	}
}

// TestHolderAskingWithAnotherLimitKeepsItsLease: a holder asking again under another limit is
// refused by every node, and its lease stays on every node: a mismatch changed nothing, so
// nothing is released.
func TestHolderAskingWithAnotherLimitKeepsItsLease(t *testing.T) {
	ctx := context.Background()
	nodes := []*memory.Store{memory.New(), memory.New(), memory.New()}
	s := mustNew(t, []core.Store{nodes[0], nodes[1], nodes[2]})
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 2, TTL: time.Minute}
	res, err := s.Acquire(ctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("a: %+v, %v", res, err)
	}
	req.Limit = 3
	if _, err := s.Acquire(ctx, req); !errors.Is(err, core.ErrLimitMismatch) {
		t.Fatalf("a again with limit 3: %v, want ErrLimitMismatch", err)
	}
	for i, n := range nodes {
		snap, err := n.Inspect(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Leases) != 1 || snap.Leases[0].Fence != res.Fence || snap.Limit != 2 {
			t.Errorf("node %d after the refusal: %+v, want a's lease at fence %d, limit 2", i, snap, res.Fence)
		}
	}
}

// TestNodeOfAnotherLimitLeavesNothingToACallerChosenHolder: a semaphore of 2 over three nodes
// needs all three, so one node's mismatch decides. Under a holder id the caller chose (which
// Redlock may not release at any fence), the grants the other nodes made are still given
// back: the caller was told it failed, so nobody would hold them.
func TestNodeOfAnotherLimitLeavesNothingToACallerChosenHolder(t *testing.T) {
	ctx := context.Background()
	nodes := []*memory.Store{memory.New(), memory.New(), memory.New()}
	s := mustNew(t, []core.Store{nodes[0], nodes[1], nodes[2]})
	if r, err := nodes[2].Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "stray", Permits: 1, Limit: 3, TTL: time.Minute}); err != nil || !r.Granted {
		t.Fatalf("stray on node 2: %+v, %v", r, err)
	}
	req := core.AcquireRequest{Key: "k", Holder: "worker-1", Permits: 1, Limit: 2, TTL: time.Minute}
	if _, err := s.Acquire(ctx, req); !errors.Is(err, core.ErrLimitMismatch) {
		t.Fatalf("acquire of limit 2, node 2 held under limit 3: %v, want ErrLimitMismatch", err)
	}
	for i, n := range nodes[:2] {
		if snap, err := n.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 0 {
			t.Errorf("node %d after the refusal: %+v, %v; want no lease", i, snap, err)
		}
	}
}

// holds reports whether holder has a lease on key in store.
func holds(t *testing.T, store core.Store, key, holder string) bool {
	t.Helper()
	snap, err := store.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range snap.Leases {
		if l.Holder == holder {
			return true
		}
	}
	return false
}

// lateAnswer is a memory store whose acquires take effect at once and answer after delay,
// whatever the caller's context: a grant the caller hears of too late.
type lateAnswer struct {
	*memory.Store
	delay time.Duration
}

func (n lateAnswer) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := n.Store.Acquire(context.WithoutCancel(ctx), req)
	time.Sleep(n.delay)
	return res, err
}

func (n lateAnswer) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	res, err := n.Store.AcquireAbove(context.WithoutCancel(ctx), req, floor)
	time.Sleep(n.delay)
	return res, err
}

// TestGrantAfterAMismatchIsGivenBack: a slow node that grants, but answers after the other
// nodes' mismatches decided the acquire, gives its grant back: nothing of the refused call stays.
func TestGrantAfterAMismatchIsGivenBack(t *testing.T) {
	ctx := context.Background()
	nodes := []*memory.Store{memory.New(), memory.New(), memory.New()}
	s := mustNew(t, []core.Store{nodes[0], nodes[1], lateAnswer{nodes[2], 100 * time.Millisecond}})
	for _, n := range nodes[:2] {
		if r, err := n.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "stray", Permits: 1, Limit: 3, TTL: time.Minute}); err != nil || !r.Granted {
			t.Fatalf("stray lease: %+v, %v", r, err)
		}
	}
	if _, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true}); !errors.Is(err, core.ErrLimitMismatch) {
		t.Fatalf("acquire of limit 1, nodes 0 and 1 held under limit 3: %v, want ErrLimitMismatch", err)
	}
	poll.Until(t, "the refused acquire's late grant gone from node 2", func() bool { return !holds(t, nodes[2], "k", "a") })
}

// quorumBesideStray returns three nodes, a Redlock over them to which node 2 answers late, and
// a's lease of "k" of limit 1 that nodes 0 and 1, a quorum, granted, node 2 holding a stray lease
// of "k" of limit 3.
func quorumBesideStray(t *testing.T) ([]*memory.Store, *redlock.Store, core.AcquireResult) {
	t.Helper()
	ctx := context.Background()
	nodes := []*memory.Store{memory.New(), memory.New(), memory.New()}
	s := mustNew(t, []core.Store{nodes[0], nodes[1], lateAnswer{nodes[2], 100 * time.Millisecond}})
	if r, err := nodes[2].Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "stray", Permits: 1, Limit: 3, TTL: time.Minute}); err != nil || !r.Granted {
		t.Fatalf("stray on node 2: %+v, %v", r, err)
	}
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true})
	if err != nil || !res.Granted {
		t.Fatalf("acquire with a quorum free and node 2 slow: %+v, %v; want granted", res, err)
	}
	return nodes, s, res
}

// TestMismatchAfterAQuorumGrantedLeavesTheLease: a slow node that answers with a mismatch
// after a quorum granted changes nothing: the lease holds the quorum, whose nodes refuse a
// request of another limit, and that node, which granted nothing, has nothing to give back.
func TestMismatchAfterAQuorumGrantedLeavesTheLease(t *testing.T) {
	ctx := context.Background()
	nodes, s, res := quorumBesideStray(t)
	other := core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 3, TTL: time.Minute, Unshared: true}
	if _, err := s.Acquire(ctx, other); !errors.Is(err, core.ErrLimitMismatch) {
		t.Errorf("acquire of limit 3 beside the quorum's lease of limit 1: %v, want ErrLimitMismatch", err)
	}
	if !holds(t, nodes[0], "k", "a") || !holds(t, nodes[1], "k", "a") || !holds(t, nodes[2], "k", "stray") {
		t.Error("the quorum's lease (or node 2's stray) did not stay as it was")
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: res.Fence}); !ok || err != nil {
		t.Errorf("release of the quorum's lease: %v, %v", ok, err)
	}
}

// TestInspectShowsTheQuorumsLeaseBesideANodeOfAnotherLimit: a quorum holds a mutex's lease
// and one node a stray lease of a semaphore of 3 (left by a failed acquire, say): Inspect
// reports the quorum's limit and its lease, not the stray node's limit, under which the
// quorum's lease would need every node and be hidden.
func TestInspectShowsTheQuorumsLeaseBesideANodeOfAnotherLimit(t *testing.T) {
	ctx := context.Background()
	_, s, res := quorumBesideStray(t)
	snap, err := s.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Limit != 1 || len(snap.Leases) != 1 || snap.Leases[0].Holder != "a" || snap.Leases[0].Fence != res.Fence {
		t.Errorf("Inspect: %+v, want limit 1 and a's lease at fence %d", snap, res.Fence)
	}
}

// TestStrayLeaseOfAnotherLimitOnOneNodeLeavesTheQuorumFree: one node holds a stray lease of
// another limit (left by a failed acquire), the others are free. Whether its mismatch comes
// first or last, an acquire under the key's limit is granted by the quorum, as it is when that
// node answers late: the stray is no Redlock lease (Inspect does not show it).
func TestStrayLeaseOfAnotherLimitOnOneNodeLeavesTheQuorumFree(t *testing.T) {
	ctx := context.Background()
	for i := range 20 {
		nodes := []*memory.Store{memory.New(), memory.New(), memory.New()}
		s := mustNew(t, []core.Store{nodes[0], nodes[1], nodes[2]})
		if r, err := nodes[i%3].Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "stray", Permits: 1, Limit: 3, TTL: time.Minute}); err != nil || !r.Granted {
			t.Fatalf("stray on node %d: %+v, %v", i%3, r, err)
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true})
		if err != nil || !res.Granted {
			t.Fatalf("try %d, stray on node %d: %+v, %v; want granted by the other two", i, i%3, res, err)
		}
	}
}

package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// TestNodeOfAnotherLimitRefusesTheQuorum: one node holding the key under another limit (a lease
// the quorum never saw) is enough for the acquire to fail with its ErrLimitMismatch, and the
// grants the other nodes made for it are given back: nothing of the call is left on any node.
func TestNodeOfAnotherLimitRefusesTheQuorum(t *testing.T) {
	ctx := context.Background()
	nodes := []*memory.Store{memory.New(), memory.New(), memory.New()}
	s := mustNew(t, []core.Store{nodes[0], nodes[1], nodes[2]})
	if res, err := nodes[2].Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "stray", Permits: 1, Limit: 3, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("stray lease on node 2: %+v, %v", res, err)
	}
	_, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true})
	var lm *core.LimitMismatchError
	if !errors.As(err, &lm) || lm.Held != 3 || lm.Requested != 1 {
		t.Fatalf("Acquire of limit 1 with a node held under limit 3: %v, want a *core.LimitMismatchError naming 3 and 1", err)
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

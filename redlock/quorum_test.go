package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func TestQuorumFor(t *testing.T) {
	c := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, tc := range []struct{ nodes, permits, limit, want int }{
		{3, 1, 1, 2},                         // a mutex: a majority
		{3, 1, 2, 3},                         // a semaphore: more than a majority
		{3, 2, 2, 2},                         // every permit: a majority
		{5, 1, 3, 4},                         // ⌊5·3/4⌋+1
		{5, 3, 3, 3},                         // every permit
		{3, 1, core.MaxLimit, 2},             // a reader of a shared-exclusive key
		{3, core.MaxLimit, core.MaxLimit, 2}, // its writer
		{5, core.MaxLimit, core.MaxLimit, 3}, // its writer, 5 nodes
		{4, 1, core.MaxLimit, 3},             // an even N: N/2+1
		{1, 1, core.MaxLimit, 1},             // one node
		{3, 1, core.MaxLimit - 1, 3},         // just below: counted exactly
		{3, core.MaxLimit - 1, core.MaxLimit - 1, 2},
	} {
		_, ss := nodes(c, tc.nodes)
		if got := mustNew(t, ss).QuorumFor(tc.permits, tc.limit); got != tc.want {
			t.Errorf("%d nodes: QuorumFor(%d, %d) = %d, want %d", tc.nodes, tc.permits, tc.limit, got, tc.want)
		}
	}
}

// A key of limit core.MaxLimit is shared-exclusive over Redlock: a lease of other sizes than one
// permit or all of them is refused, before any node is asked.
func TestSharedExclusiveKeyRefusesOtherWeights(t *testing.T) {
	c := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, ss := nodes(c, 3)
	s := mustNew(t, ss)
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "h", Permits: 2, Limit: core.MaxLimit, TTL: time.Minute}
	if _, err := s.Acquire(ctx, req); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("Acquire of 2 permits of core.MaxLimit: %v, want ErrInvalid", err)
	}
	for i, n := range ss {
		if snap, err := n.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 0 {
			t.Errorf("node %d: %+v, %v; want nothing sent", i, snap, err)
		}
	}
}

// A writer (every permit) and a reader (one) of a shared-exclusive key each need a majority, so
// with one node of three down both are granted in turn, and never together.
func TestSharedExclusiveKeyWithANodeDown(t *testing.T) {
	c := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ns, ss := nodes(c, 3)
	s := mustNew(t, ss)
	ctx := context.Background()
	ns[2].set(true, 0)
	w := core.AcquireRequest{Key: "k", Holder: "w", Permits: core.MaxLimit, Limit: core.MaxLimit, TTL: time.Minute}
	r := core.AcquireRequest{Key: "k", Holder: "r", Permits: 1, Limit: core.MaxLimit, TTL: time.Minute}
	if res, err := s.Acquire(ctx, w); err != nil || !res.Granted {
		t.Fatalf("writer with 2 of 3 nodes up: %+v, %v; want granted", res, err)
	}
	if res, err := s.Acquire(ctx, r); err != nil || res.Granted {
		t.Fatalf("reader while the writer holds: %+v, %v; want refused", res, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "w"}); err != nil || !ok {
		t.Fatalf("writer's release: %v, %v", ok, err)
	}
	if res, err := s.Acquire(ctx, r); err != nil || !res.Granted {
		t.Fatalf("reader with 2 of 3 nodes up: %+v, %v; want granted", res, err)
	}
	if res, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "r", TTL: time.Minute}); err != nil || res.Permits != 1 {
		t.Fatalf("reader's extend with 2 of 3 nodes up: %+v, %v; want kept", res, err)
	}
	if snap, err := s.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "r" {
		t.Fatalf("Inspect with 2 of 3 nodes up: %+v, %v; want the reader's lease", snap, err)
	}
	if res, err := s.Acquire(ctx, w); err != nil || res.Granted {
		t.Fatalf("writer while a reader holds: %+v, %v; want refused", res, err)
	}
}

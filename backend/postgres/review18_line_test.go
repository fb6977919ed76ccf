package postgres_test

// An adversarial review of the PostgreSQL driver (review18): each test turns a suspicion into a check.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestPermitsChangeInLine: a holder waiting in line that asks again with other permits has its
// place changed, not doubled; a holder that holds a lease and asks with other permits is refused
// with ErrInvalid and keeps its lease and fence.
func TestPermitsChangeInLine(t *testing.T) {
	s := newStore(t, serverURL(t))
	ctx, key := context.Background(), uniqueKey(t)
	h := core.AcquireRequest{Key: key, Holder: "h", Permits: 2, Limit: 3, TTL: time.Minute}
	held, err := s.Acquire(ctx, h)
	if err != nil || !held.Granted {
		t.Fatal(held, err)
	}
	w := core.AcquireRequest{Key: key, Holder: "w", Permits: 3, Limit: 3, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, w); err != nil || res.Granted {
		t.Fatalf("3 of 3 with 2 held: %+v, %v; want refused", res, err)
	}
	w.Permits = 1 // would fit, but keeps its place rather than jumping it
	if res, err := s.Acquire(ctx, w); err != nil || !res.Granted {
		// Alone in line, its place is at the head: the line serves it as it asks now.
		t.Fatalf("the head asking 1 of 3 with 2 held: %+v, %v; want granted", res, err)
	}
	snap, _ := s.Inspect(ctx, key)
	if len(snap.Waiters) != 0 || snap.InUse() != 3 {
		t.Fatalf("line %+v, leases %+v: want the place served once", snap.Waiters, snap.Leases)
	}
	h.Permits = 1
	if _, err := s.Acquire(ctx, h); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("the holder asking other permits: %v, want ErrInvalid", err)
	}
	snap, _ = s.Inspect(ctx, key)
	for _, l := range snap.Leases {
		if l.Holder == "h" && (l.Permits != 2 || l.Fence != held.Fence) {
			t.Errorf("the holder's lease after a refused change: %+v; want 2 permits, fence %d", l, held.Fence)
		}
	}
}

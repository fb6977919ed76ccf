package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// TestLeaveKeepsTheLockDelayOfAnExpiredLineGrant: a grant the line made to a waiter, with the
// lock delay its place asked for, that expires untaken keeps its permits closed for the delay,
// even when the waiter then leaves the line (closes its waiter): the leave gives back only a
// grant that is still held, as on Redis and PostgreSQL.
func TestLeaveKeepsTheLockDelayOfAnExpiredLineGrant(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock))
	ctx := context.Background()
	must(t, s, req("a", 1, 1, 0), true)
	b := req("b", 1, 1, time.Hour)
	b.TTL, b.LockDelay = time.Second, time.Hour
	w, err := s.Register(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s, b, false) // b takes its place in the line
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	clock.Advance(2 * time.Second) // b's grant, untaken, expires
	w.Close()
	snap, err := s.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Delayed) != 1 || snap.Delayed[0].Holder != "b" {
		t.Errorf("Inspect after b left: leases %+v, delayed %+v; want b's grant in its lock delay", snap.Leases, snap.Delayed)
	}
	must(t, s, req("c", 1, 1, 0), false)
}

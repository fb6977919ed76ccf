package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestInspectReportsADelayHeldByAQuorum: a lease that expired unreleased is reported in its lock
// delay when a quorum of nodes keep it closed, with the time the quorum's last node keeps it; a
// delay on a minority of nodes, which closes nothing a quorum would refuse, is not reported.
func TestInspectReportsADelayHeldByAQuorum(t *testing.T) {
	c := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, ss := nodes(c, 3)
	rl := mustNew(t, ss)
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Second, LockDelay: time.Minute}
	res, err := rl.Acquire(ctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire = %+v, %v; want granted", res, err)
	}
	minority := req
	minority.Key, minority.Holder = "m", "b"
	if res, err := ss[0].Acquire(ctx, minority); err != nil || !res.Granted {
		t.Fatalf("Acquire on one node = %+v, %v; want granted", res, err)
	}
	c.Advance(2 * time.Second)

	snap, err := rl.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Leases) != 0 || len(snap.Delayed) != 1 || snap.Delayed[0].Holder != "a" || snap.Delayed[0].Fence != res.Fence {
		t.Fatalf("Inspect after the lease expired: leases %+v, delayed %+v; want a's delay at fence %d", snap.Leases, snap.Delayed, res.Fence)
	}
	if left := snap.Delayed[0].Left; left <= 50*time.Second || left > time.Minute {
		t.Errorf("the delay has %v left, want about 59s", left)
	}
	if got, err := rl.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "c", Permits: 1, Limit: 1, TTL: time.Second}); err != nil || got.Granted {
		t.Errorf("Acquire during the delay = %+v, %v; want refused", got, err)
	}
	if snap, err := rl.Inspect(ctx, "m"); err != nil || len(snap.Delayed) != 0 {
		t.Errorf("Inspect of a key delayed on one node of 3: %+v, %v; want no delay", snap.Delayed, err)
	}
}

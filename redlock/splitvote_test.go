package redlock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// TestSplitVoteLineGrantIsNoLoss: W wins nodes 0 and 1 while Y holds node 2; Y then releases
// node 2, whose line grants W a node-local lease at a newer fence (built here by hand: the
// memory store keeps no line). W's Redlock lease is healthy: its refreshes must not report it
// lost, Held must say true, and the node-local lease must be released so node 2 is free again.
// In a bubble: fake time, so that a loaded machine's stall cannot end the 300 ms lease.
func TestSplitVoteLineGrantIsNoLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns, ss := nodes(core.SystemClock{}, 3)
		s := mustNew(t, ss)
		ctx := context.Background()
		const key = "split"
		y := core.AcquireRequest{Key: key, Holder: "y", Permits: 1, Limit: 1, TTL: time.Minute}
		yFloor := uint64(time.Now().Add(time.Hour).UnixMicro()) // Y's try came later: a higher floor
		if r, err := ns[2].AcquireAbove(ctx, y, yFloor); err != nil || !r.Granted {
			t.Fatalf("Y on node 2: %+v, %v", r, err)
		}
		refreshed := make(chan struct{}, 100)
		m, _ := primitives.NewMutex(s, key, primitives.WithTTL(300*time.Millisecond), primitives.WithEvents(func(e primitives.Event) {
			if e.Kind == primitives.EventRefreshed {
				select {
				case refreshed <- struct{}{}:
				default:
				}
			}
		}))
		l, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		// Y gives node 2 up; its line hands W a lease there, at a fence above Y's.
		ns[2].Release(ctx, core.ReleaseRequest{Key: key, Holder: "y"})
		w := core.AcquireRequest{Key: key, Holder: l.Holder(), Permits: 1, Limit: 1, TTL: time.Minute}
		if r, err := ns[2].RaiseFence(ctx, w, yFloor+1); err != nil || !r.Granted || r.Fence == l.Fence() {
			t.Fatalf("line grant to W on node 2: %+v, %v; want a fence other than the lease's %d", r, err, l.Fence())
		}
		for n := 0; n < 3; {
			select {
			case <-refreshed:
				n++
			case <-l.Done():
				t.Fatalf("a healthy lease (nodes 0 and 1 at fence %d) reported lost over a line grant on node 2: %v", l.Fence(), l.Err())
			case <-time.After(time.Second):
				t.Fatal("no refresh within a second")
			}
		}
		if ok, err := l.Held(ctx); err != nil || !ok {
			t.Errorf("Held = %v, %v; want true", ok, err)
		}
		poll.For(t, "the node-local lease on node 2 released", func() ([]core.LeaseInfo, bool) {
			snap, _ := ns[2].Inspect(ctx, key)
			return snap.Leases, len(snap.Leases) == 0
		})
	})
}

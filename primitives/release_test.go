package primitives_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

func TestFailedReleaseCanBeRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		rec.failReleases(errNetwork)
		if err := l.Release(context.Background()); !errors.Is(err, errNetwork) {
			t.Fatalf("Release with the store unreachable: %v, want the store's error", err)
		}
		select {
		case <-l.Done():
			t.Fatal("a lease whose release failed was reported ended")
		default:
		}
		rec.failReleases(nil)
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("retried Release: %v", err)
		}
		if snap, _ := rec.inner.Inspect(context.Background(), "job"); len(snap.Leases) != 0 {
			t.Errorf("the retried Release left %+v", snap.Leases)
		}
	})
}

func TestFailedReleaseLeavesLeaseToItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		rec.failReleases(errNetwork)
		l.Release(context.Background())
		extends := rec.extends.Load()
		<-l.Done() // lost at the deadline, unrefreshed
		if rec.extends.Load() != extends || !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("after a failed release: %d more refreshes, Err %v; want none and ErrLost", rec.extends.Load()-extends, l.Err())
		}
	})
}

// TestStaleReleaseUnderOneHolderIDLeavesTheNewerLease: under WithHolder, a lease that was lost
// and expired must not free a newer lease taken under the same id: release names the fence.
func TestStaleReleaseUnderOneHolderIDLeavesTheNewerLease(t *testing.T) {
	store := memory.New()
	ctx := context.Background()
	stale, _ := primitives.NewMutex(store, "job", primitives.WithHolder("worker-1"), primitives.WithTTL(50*time.Millisecond), primitives.WithoutRefresh())
	l1, err := stale.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-l1.Done() // lost at its deadline; then the store's expiry passes too
	poll.Until(t, "the store to let the expired lease go", func() bool {
		snap, err := store.Inspect(ctx, "job")
		return err != nil || len(snap.Leases) == 0
	})
	fresh, _ := primitives.NewMutex(store, "job", primitives.WithHolder("worker-1"), primitives.WithTTL(time.Minute))
	l2, err := fresh.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Fence() == l1.Fence() {
		t.Fatalf("the second lease has the first one's fence %d", l1.Fence())
	}
	if err := l1.Release(ctx); !errors.Is(err, core.ErrLost) {
		t.Errorf("stale Release: %v, want ErrLost", err)
	}
	snap, err := store.Inspect(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Leases) != 1 || snap.Leases[0].Fence != l2.Fence() {
		t.Fatalf("after the stale lease's Release the store holds %+v, want the newer lease (fence %d)", snap.Leases, l2.Fence())
	}
	if held, err := l2.Held(ctx); err != nil || !held {
		t.Errorf("newer lease Held = %v, %v; want true", held, err)
	}
}

// TestRetriedReleaseAfterALostReplyIsNotALoss: Release fails when its reply is lost,
// and the lease stays (TestFailedReleaseCanBeRetried); the caller retries, and the store says
// the holder holds nothing: its own first release went through. The retry reports the lease
// released, not lost: no error wrapping core.ErrLost, no OnLost, no EventLost. (A Release retried
// after a lost reply is safe, as an Acquire retried after one is.)
func TestRetriedReleaseAfterALostReplyIsNotALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &primitives.LostReply{Store: memory.New()}
		var lostCalls, lostEvents atomic.Int32
		m := mustMutex(t, s, primitives.WithTTL(3*time.Second),
			primitives.WithOnLost(func(core.Lease, error) { lostCalls.Add(1) }),
			primitives.WithEvents(func(e primitives.Event) {
				if e.Kind == primitives.EventLost {
					lostEvents.Add(1)
				}
			}))
		l := mustAcquire(t, m)
		s.Lose.Store(true)
		if err := l.Release(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Release with its reply lost = %v; want the ctx's error", err)
		}
		s.Lose.Store(false)
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("retried Release after a lost reply = %v; want nil: the lease was released by the first", err)
		}
		synctest.Wait() // OnLost runs on a goroutine of its own
		if lostCalls.Load() != 0 || lostEvents.Load() != 0 {
			t.Errorf("after the retried Release: %d OnLost calls, %d EventLost; want none", lostCalls.Load(), lostEvents.Load())
		}
		select {
		case <-l.Done():
		default:
			t.Error("the released lease's Done is not closed")
		}
		if l.Err() != nil {
			t.Errorf("the released lease's Err = %v; want nil, as after a clean Release", l.Err())
		}
	})
}

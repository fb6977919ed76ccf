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
	"github.com/leasehold/leasehold/primitives"
)

// onLostCounter returns a WithOnLost option and the count of its calls.
func onLostCounter() (primitives.Option, *atomic.Int32) {
	var n atomic.Int32
	return primitives.WithOnLost(func(core.Lease, error) { n.Add(1) }), &n
}

// assertOnLostOnce waits until the bubble's goroutines are blocked (OnLost runs on its own)
// and checks that the callback counted by lost ran exactly once. It runs inside a synctest bubble.
func assertOnLostOnce(t *testing.T, lost *atomic.Int32) {
	t.Helper()
	synctest.Wait()
	if n := lost.Load(); n != 1 {
		t.Errorf("OnLost ran %d times, want once", n)
	}
}

// assertLostNow checks that l has ended as lost, with an Err wrapping core.ErrLost and also
// (unless nil).
func assertLostNow(t *testing.T, l core.Lease, also error) {
	t.Helper()
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed: the loss was known but not reported")
	}
	if err := l.Err(); !errors.Is(err, core.ErrLost) || (also != nil && !errors.Is(err, also)) {
		t.Errorf("Err = %v, want one wrapping ErrLost and %v", err, also)
	}
}

// TestClosedStoreLosesLeaseAtItsNextRefresh: a Store gives a lease no signal when it is closed,
// so the lease learns of it at its next refresh (here 1s after the acquire, the close at 100ms)
// and is lost then, with ErrClosed in its Err; until then Err is nil.
func TestClosedStoreLosesLeaseAtItsNextRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		onLost, lost := onLostCounter()
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second), onLost)
		start := time.Now()
		l := mustAcquire(t, m)
		time.Sleep(100 * time.Millisecond)
		store.Close()
		synctest.Wait()
		if err := l.Err(); err != nil {
			t.Fatalf("Err right after Close = %v; the lease cannot know before its next refresh", err)
		}
		<-l.Done()
		if at := time.Since(start); at != time.Second {
			t.Errorf("lost %v after the acquire, want at the next refresh (1s), not at the deadline", at)
		}
		assertLostNow(t, l, core.ErrClosed)
		assertOnLostOnce(t, lost)
	})
}

// TestClosedStoreLosesLeaseAtOnceWhenTold: a Release, Extend or Held that finds the Store closed
// ends the lease at once as lost, without waiting for a refresh or the deadline.
func TestClosedStoreLosesLeaseAtOnceWhenTold(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(core.Lease) error
	}{
		{"release", func(l core.Lease) error { return l.Release(context.Background()) }},
		{"extend", func(l core.Lease) error { _, err := l.Extend(context.Background(), time.Minute); return err }},
		{"held", func(l core.Lease) error { _, err := l.Held(context.Background()); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memory.New()
				onLost, lost := onLostCounter()
				m := mustMutex(t, store, primitives.WithTTL(time.Minute), primitives.WithoutRefresh(), onLost)
				l := mustAcquire(t, m)
				store.Close()
				if err := tc.op(l); !errors.Is(err, core.ErrClosed) {
					t.Errorf("%s on a closed store: err = %v, want ErrClosed", tc.name, err)
				}
				assertLostNow(t, l, core.ErrClosed)
				if err := l.Release(context.Background()); !errors.Is(err, core.ErrLost) && tc.name != "release" {
					t.Errorf("Release after the loss = %v, want ErrLost", err)
				}
				assertOnLostOnce(t, lost)
			})
		})
	}
}

// TestHeldFindingLeaseGoneMarksItLost: when Held finds that the store no longer holds the lease
// (expired by the store's clock, here moved by hand, before the lease's own deadline), the lease
// is lost at once: Done closes, Err wraps ErrLost, OnLost runs once.
func TestHeldFindingLeaseGoneMarksItLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := core.NewManualClock(time.Now())
		store := memory.New(memory.WithClock(clock))
		onLost, lost := onLostCounter()
		m := mustMutex(t, store, primitives.WithTTL(time.Minute), primitives.WithoutRefresh(), onLost)
		l := mustAcquire(t, m)
		clock.Advance(2 * time.Minute) // expired in the store; the lease's deadline is a minute away
		if held, err := l.Held(context.Background()); held || err != nil {
			t.Fatalf("Held of an expired lease = %v, %v; want false, nil", held, err)
		}
		assertLostNow(t, l, nil)
		if held, err := l.Held(context.Background()); held || err != nil {
			t.Errorf("second Held = %v, %v; want false, nil", held, err)
		}
		if err := l.Release(context.Background()); !errors.Is(err, core.ErrLost) {
			t.Errorf("Release of a lost lease = %v, want ErrLost", err)
		}
		assertOnLostOnce(t, lost)
	})
}

// TestHeldAfterReleaseIsNoLoss: a released lease is not held, and not lost.
func TestHeldAfterReleaseIsNoLoss(t *testing.T) {
	onLost, lost := onLostCounter()
	m := mustMutex(t, memory.New(), onLost)
	l := mustAcquire(t, m)
	mustRelease(t, l)
	if held, err := l.Held(t.Context()); held || err != nil {
		t.Errorf("Held after Release = %v, %v; want false, nil", held, err)
	}
	if err := l.Err(); err != nil || lost.Load() != 0 {
		t.Errorf("after Release and Held: Err %v, OnLost %d times; want nil and none", err, lost.Load())
	}
}

// TestHeldOfALeaseReportedLostIsFalse: a lease reported lost at its stop point, which the store
// still holds for the margin, answers Held as lost (false, nil, nothing sent), as Err does.
func TestHeldOfALeaseReportedLostIsFalse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newRecorder()
		m := mustMutex(t, store, primitives.WithTTL(10*time.Second), primitives.WithoutRefresh(), primitives.WithStopMargin(2*time.Second))
		l := mustAcquire(t, m)
		<-l.Done()
		snap, err := store.Inspect(context.Background(), l.Key())
		if err != nil || len(snap.Leases) != 1 {
			t.Fatalf("the store's view inside the stop margin: %+v, %v; want the lease still held", snap, err)
		}
		calls := store.calls()
		if held, err := l.Held(context.Background()); held || err != nil {
			t.Errorf("Held of a lease whose Err is %v = %v, %v; want false, nil", l.Err(), held, err)
		}
		if n := store.calls() - calls; n != 0 {
			t.Errorf("Held of a lost lease sent %d calls, want none", n)
		}
		assertLostNow(t, l, nil)
	})
}

// slowInspect is a Store whose Inspect takes a while, by the bubble's clock, after reading.
type slowInspect struct {
	core.Store
	delay time.Duration
}

func (s slowInspect) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	snap, err := s.Store.Inspect(ctx, key)
	time.Sleep(s.delay)
	return snap, err
}

// TestHeldOfALeaseLostDuringTheCallIsFalse: when the lease reaches its stop point while Held's
// reply is on its way (the store said held), Held answers as the lease now does: false, nil,
// with Err wrapping ErrLost.
func TestHeldOfALeaseLostDuringTheCallIsFalse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := slowInspect{Store: memory.New(), delay: 5 * time.Second}
		m := mustMutex(t, store, primitives.WithTTL(10*time.Second), primitives.WithoutRefresh(), primitives.WithStopMargin(2*time.Second))
		l := mustAcquire(t, m)
		time.Sleep(4 * time.Second) // the stop point (at about 7.9s) falls inside Held's call
		if held, err := l.Held(context.Background()); held || err != nil {
			t.Errorf("Held across the stop point = %v, %v (Err %v); want false, nil", held, err, l.Err())
		}
		assertLostNow(t, l, nil)
	})
}

package primitives_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func mustMutex(t *testing.T, store core.Store, opts ...primitives.Option) *primitives.Mutex {
	t.Helper()
	m, err := primitives.NewMutex(store, "job", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustAcquire(t *testing.T, m *primitives.Mutex) core.Lease {
	t.Helper()
	l, err := m.Acquire(t.Context())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return l
}

// acquireAsync starts s.Acquire(ctx, n) on a goroutine and returns where its lease will arrive.
func acquireAsync(t *testing.T, s interface {
	Acquire(context.Context, int) (core.Lease, error)
}, n int) <-chan core.Lease {
	got := make(chan core.Lease, 1)
	go func() {
		l, err := s.Acquire(context.Background(), n)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// asSem adapts a Mutex to acquireAsync.
type asSem struct{ m *primitives.Mutex }

func (a asSem) Acquire(ctx context.Context, _ int) (core.Lease, error) { return a.m.Acquire(ctx) }

func mustRelease(t *testing.T, l core.Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestTryAcquireReportsBusy(t *testing.T) {
	rec := newRecorder()
	m := mustMutex(t, rec)
	l := mustAcquire(t, m)
	defer mustRelease(t, l)
	before := rec.acquires.Load()
	_, err := m.TryAcquire(t.Context())
	if !errors.Is(err, core.ErrNotAcquired) || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("TryAcquire of a held mutex: err = %v, want ErrNotAcquired saying busy", err)
	}
	if n := rec.acquires.Load() - before; n != 1 {
		t.Errorf("TryAcquire made %d store calls, want 1", n)
	}
}

func TestReleaseWakesWaiterWithoutPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store, primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(2*time.Hour))
		l := mustAcquire(t, m)
		got := acquireAsync(t, asSem{m}, 1)
		time.Sleep(time.Minute)
		synctest.Wait()
		start := time.Now()
		mustRelease(t, l)
		l2 := <-got
		if waited := time.Since(start); waited != 0 {
			t.Errorf("the waiter took %v of fake time after the release: it was not woken by notification", waited)
		}
		if l2.Fence() <= l.Fence() {
			t.Errorf("next holder's fence %d is not above %d", l2.Fence(), l.Fence())
		}
		mustRelease(t, l2)
	})
}

func TestReleaseWakesOneWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		store := notifying{rec}
		m := mustMutex(t, store, primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(2*time.Hour))
		l := mustAcquire(t, m)
		const waiters = 5
		leases := make(chan core.Lease, waiters)
		for range waiters {
			go func() { leases <- <-acquireAsync(t, asSem{m}, 1) }()
		}
		synctest.Wait()
		before := rec.acquires.Load()
		mustRelease(t, l)
		next := <-leases
		synctest.Wait()
		if n := rec.acquires.Load() - before; n != 1 {
			t.Errorf("one release led to %d acquire calls, want 1 (no thundering herd)", n)
		}
		// Hand the lock down the line; every waiter gets it in turn.
		for range waiters - 1 {
			mustRelease(t, next)
			next = <-leases
		}
		mustRelease(t, next)
	})
}

func TestWaiterRetriesWhenLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		holder := mustMutex(t, store, primitives.WithTTL(5*time.Second), primitives.WithoutRefresh())
		waiter := mustMutex(t, store, primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(time.Hour))
		l := mustAcquire(t, holder)
		start := time.Now()
		l2 := mustAcquire(t, waiter)
		if waited := time.Since(start); waited != 5*time.Second {
			t.Errorf("waiter got the lease after %v, want 5s (when the store said it expires)", waited)
		}
		<-l.Done()
		if err := l.Release(context.Background()); !errors.Is(err, core.ErrLost) {
			t.Errorf("Release of an expired lease: %v, want ErrLost", err)
		}
		mustRelease(t, l2)
	})
}

func TestStoreWithoutNotifierFallsBackToRetryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder() // no Notifier
		m := mustMutex(t, rec, primitives.WithRetryInterval(100*time.Millisecond))
		l := mustAcquire(t, m)
		done := acquireAsync(t, asSem{m}, 1)
		time.Sleep(time.Second)
		mustRelease(t, l)
		start := time.Now()
		l2 := <-done
		if waited := time.Since(start); waited > 100*time.Millisecond {
			t.Errorf("waiter took %v after release, want at most the retry interval", waited)
		}
		mustRelease(t, l2)
	})
}

func TestAcquireTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store, primitives.WithAcquireTimeout(3*time.Second))
		l := mustAcquire(t, m)
		start := time.Now()
		_, err := m.Acquire(context.Background())
		if !errors.Is(err, core.ErrNotAcquired) || !strings.Contains(err.Error(), "timeout") {
			t.Errorf("err = %v, want ErrNotAcquired naming the timeout", err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Errorf("gave up after %v, want 3s", waited)
		}
		mustRelease(t, l)
	})
}

func TestAttemptsExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithAttempts(4))
		l := mustAcquire(t, m)
		before := rec.acquires.Load()
		_, err := m.Acquire(context.Background())
		if !errors.Is(err, core.ErrNotAcquired) || !strings.Contains(err.Error(), "4 attempts") {
			t.Errorf("err = %v, want ErrNotAcquired naming 4 attempts", err)
		}
		if n := rec.acquires.Load() - before; n != 4 {
			t.Errorf("made %d attempts, want 4", n)
		}
		mustRelease(t, l)
	})
}

func TestAcquireHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store)
		l := mustAcquire(t, m)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := m.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want one wrapping context.DeadlineExceeded", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		if _, err := m.TryAcquire(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want one wrapping context.Canceled", err)
		}
		mustRelease(t, l)
	})
}

func TestGrantRacingCancellationIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec)
		ctx, cancel := context.WithCancel(context.Background())
		rec.onAcquire = func(context.Context) { cancel() } // ctx ends while the request is in flight
		_, err := m.Acquire(ctx)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		synctest.Wait()
		snap, _ := rec.inner.Inspect(context.Background(), "job")
		if len(snap.Leases) != 0 {
			t.Errorf("a lease granted as ctx ended was left behind: %+v", snap.Leases)
		}
	})
}

func TestRefreshKeepsLeaseAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		time.Sleep(time.Minute)
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost while refreshed: %v", err)
		}
		if n := rec.extends.Load(); n < 59 || n > 60 {
			t.Errorf("%d refreshes in a minute at TTL/3 = 1s, want 60", n)
		}
		if _, err := m.TryAcquire(context.Background()); !errors.Is(err, core.ErrNotAcquired) {
			t.Errorf("TryAcquire of a refreshed lease: err = %v, want ErrNotAcquired", err)
		}
		if want := time.Now().Add(3*time.Second - 32*time.Millisecond); l.Deadline().After(want) || l.Deadline().Before(want.Add(-time.Second)) {
			t.Errorf("Deadline %v, want within the last refresh interval of %v", l.Deadline(), want)
		}
		mustRelease(t, l)
		select {
		case <-l.Done():
		default:
			t.Error("Done not closed after Release")
		}
		if err := l.Err(); err != nil {
			t.Errorf("Err after a clean release = %v, want nil", err)
		}
	})
}

func TestLeaseTakenIsReportedLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		var calls atomic.Int32
		lostErr := make(chan error, 2)
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second), primitives.WithOnLost(func(l core.Lease, err error) {
			calls.Add(1)
			lostErr <- err
		}))
		l := mustAcquire(t, m)
		// Someone with the holder id ends the lease behind our back.
		if ok, _ := store.Release(context.Background(), core.ReleaseRequest{Key: "job", Holder: l.Holder()}); !ok {
			t.Fatal("store did not hold the lease")
		}
		start := time.Now()
		<-l.Done()
		if waited := time.Since(start); waited > time.Second {
			t.Errorf("loss noticed after %v, want within one refresh interval (1s)", waited)
		}
		if err := <-lostErr; !errors.Is(err, core.ErrLost) {
			t.Errorf("OnLost err = %v, want ErrLost", err)
		}
		if !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", l.Err())
		}
		if err := l.Release(context.Background()); !errors.Is(err, core.ErrLost) {
			t.Errorf("Release of a lost lease = %v, want ErrLost", err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("second Release = %v, want nil", err)
		}
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Errorf("OnLost ran %d times, want once", n)
		}
	})
}

func TestRefreshFailuresLoseLeaseAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		deadline := l.Deadline()
		rec.failExtends(errNetwork)
		<-l.Done()
		if now := time.Now(); now.Before(deadline) || now.After(deadline.Add(time.Millisecond)) {
			t.Errorf("lost at %v, want at the deadline %v", now, deadline)
		}
		if err := l.Err(); !errors.Is(err, core.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", err)
		}
		if n := rec.extends.Load(); n < 2 {
			t.Errorf("%d refresh attempts before the deadline, want retries", n)
		}
		if err := l.Release(context.Background()); !errors.Is(err, core.ErrLost) {
			t.Errorf("Release = %v, want ErrLost", err)
		}
	})
}

func TestPassingRefreshFaultIsSurvived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		rec.failExtends(errNetwork)
		time.Sleep(2 * time.Second) // one refresh fails; the deadline is 3s − 32ms after acquire
		rec.failExtends(nil)
		time.Sleep(time.Minute)
		if err := l.Err(); err != nil {
			t.Errorf("lease lost after a passing fault: %v", err)
		}
		mustRelease(t, l)
	})
}

func TestWithoutRefreshLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(2*time.Second), primitives.WithoutRefresh())
		l := mustAcquire(t, m)
		<-l.Done()
		if rec.extends.Load() != 0 {
			t.Errorf("a lease without refresh was refreshed")
		}
		if !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", l.Err())
		}
	})
}

func TestStopRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		time.Sleep(5500 * time.Millisecond)
		l.StopRefresh()
		n := rec.extends.Load()
		<-l.Done()
		if rec.extends.Load() != n {
			t.Errorf("refreshed after StopRefresh")
		}
		if !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", l.Err())
		}
	})
}

func TestAdopt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store)
		l := mustAcquire(t, m)
		l.StopRefresh() // the first process goes away without releasing
		adopted, err := m.Adopt(context.Background(), l.Holder())
		if err != nil {
			t.Fatalf("Adopt: %v", err)
		}
		if adopted.Fence() != l.Fence() || adopted.Permits() != 1 || adopted.Holder() != l.Holder() {
			t.Errorf("adopted lease %d/%d/%s, want the original's fence %d", adopted.Fence(), adopted.Permits(), adopted.Holder(), l.Fence())
		}
		time.Sleep(time.Minute)
		if err := adopted.Err(); err != nil {
			t.Errorf("adopted lease lost: %v", err)
		}
		mustRelease(t, adopted)
		if _, err := m.Adopt(context.Background(), "nobody"); !errors.Is(err, core.ErrNotHeld) {
			t.Errorf("Adopt of no lease: err = %v, want ErrNotHeld", err)
		}
		<-l.Done()
	})
}

func TestWithHolderAcquiresUnderThatID(t *testing.T) {
	store := memory.New()
	m := mustMutex(t, store, primitives.WithHolder("worker-7"))
	l := mustAcquire(t, m)
	defer mustRelease(t, l)
	snap, _ := store.Inspect(t.Context(), "job")
	if len(snap.Leases) != 1 || snap.Leases[0].Holder != "worker-7" || l.Holder() != "worker-7" {
		t.Errorf("leases %+v, want one of holder worker-7", snap.Leases)
	}
}

func TestHolderIDsAreRandom(t *testing.T) {
	store := memory.New()
	m := mustMutex(t, store)
	seen := map[string]bool{}
	for range 100 {
		l := mustAcquire(t, m)
		if len(l.Holder()) != 32 || seen[l.Holder()] {
			t.Fatalf("holder id %q: want 128 random bits, never repeated", l.Holder())
		}
		seen[l.Holder()] = true
		mustRelease(t, l)
	}
}

func TestClosedStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store, primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(2*time.Hour))
		l := mustAcquire(t, m)
		errc := make(chan error)
		go func() {
			_, err := m.Acquire(context.Background())
			errc <- err
		}()
		synctest.Wait()
		store.Close()
		if err := <-errc; !errors.Is(err, core.ErrClosed) {
			t.Errorf("waiting Acquire after Close: err = %v, want ErrClosed", err)
		}
		<-l.Done()
		if !errors.Is(l.Err(), core.ErrLost) || !errors.Is(l.Err(), core.ErrClosed) {
			t.Errorf("lease on a closed store: Err = %v, want ErrLost and ErrClosed", l.Err())
		}
	})
}

func TestConcurrentMutexExcludes(t *testing.T) {
	store := memory.New()
	m := mustMutex(t, store, primitives.WithRetryInterval(time.Millisecond))
	occ := conformance.NewOccupancy(1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				l, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				time.Sleep(50 * time.Microsecond) // stay inside a moment, so that a second holder would be seen
				leave()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if occ.Peak() != 1 {
		t.Errorf("%d holders inside at once", occ.Peak())
	}
}

func TestReliableWaiterSendsNothingBetweenWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		store := notifying{rec}
		m := mustMutex(t, store, primitives.WithTTL(30*time.Second), primitives.WithRetryInterval(10*time.Millisecond), primitives.WithAcquireTimeout(time.Hour))
		l := mustAcquire(t, m)
		got := acquireAsync(t, asSem{m}, 1)
		time.Sleep(10 * time.Second) // the holder refreshes; the waiter should stay quiet
		synctest.Wait()
		// The memory store can tell that no grant came between the refused try and enrolling,
		// so the waiter does not start woken.
		if n := rec.acquires.Load(); n != 2 {
			t.Errorf("%d acquire calls in 10s of waiting, want 2: the holder's and the waiter's try", n)
		}
		mustRelease(t, l)
		mustRelease(t, <-got)
		if n := rec.acquires.Load(); n != 3 {
			t.Errorf("%d acquire calls after the release, want 3: the waiter's taking its grant", n)
		}
	})
}

func TestFailedReleaseCanBeRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		rec.mu.Lock()
		rec.releaseErr = errNetwork
		rec.mu.Unlock()
		if err := l.Release(context.Background()); !errors.Is(err, errNetwork) {
			t.Fatalf("Release with the store unreachable: %v, want the store's error", err)
		}
		select {
		case <-l.Done():
			t.Fatal("a lease whose release failed was reported ended")
		default:
		}
		rec.mu.Lock()
		rec.releaseErr = nil
		rec.mu.Unlock()
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
		rec.mu.Lock()
		rec.releaseErr = errNetwork
		rec.mu.Unlock()
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
	for deadline := time.Now().Add(5 * time.Second); ; {
		snap, err := store.Inspect(ctx, "job")
		if err != nil || len(snap.Leases) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store still holds the lease 5s after its TTL")
		}
		time.Sleep(time.Millisecond) // poll, bounded
	}
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

// TestAttemptsAreSpacedByRetryIntervalWithNotifications: WithAttempts(n) is n tries spaced by at
// most the retry interval even when the store's notifications are reliable, not n waits for a
// release or for the holder's expiry. Real time, on the memory store.
func TestAttemptsAreSpacedByRetryIntervalWithNotifications(t *testing.T) {
	rec := newRecorder()
	store := notifying{rec}
	holder := mustMutex(t, store, primitives.WithTTL(30*time.Second))
	l := mustAcquire(t, holder)
	defer mustRelease(t, l)
	m := mustMutex(t, store, primitives.WithAttempts(3), primitives.WithRetryInterval(20*time.Millisecond), primitives.WithAcquireTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // far below the TTL
	defer cancel()
	before := rec.acquires.Load()
	start := time.Now()
	_, err := m.Acquire(ctx)
	if !errors.Is(err, core.ErrNotAcquired) || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("Acquire after %v: err = %v, want ErrNotAcquired naming 3 attempts well before the 30s TTL", time.Since(start), err)
	}
	if n := rec.acquires.Load() - before; n != 3 {
		t.Errorf("%d tries reached the store, want 3", n)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("gave up after %v, want at least one retry interval (20ms) between tries", waited)
	}
}

// TestHandedOverLeaseHasItsFullDeadline: a waiter that waited 4.8s for a lease with a 2s TTL
// gets a lease whose Deadline is its TTL (less the drift allowance) from when Acquire returns,
// not what was left of a grant made while it waited.
func TestHandedOverLeaseHasItsFullDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		ttl := 2 * time.Second
		m := mustMutex(t, store, primitives.WithTTL(ttl), primitives.WithAcquireTimeout(time.Minute))
		l := mustAcquire(t, m)
		got := acquireAsync(t, asSem{m}, 1)
		time.Sleep(4800 * time.Millisecond) // the holder refreshes; the waiter waits
		mustRelease(t, l)
		l2 := <-got
		defer mustRelease(t, l2)
		if left, want := time.Until(l2.Deadline()), ttl-ttl/100-2*time.Millisecond; left < want {
			t.Errorf("the handed-over lease's deadline is %v away, want %v (its TTL less the drift allowance)", left, want)
		}
	})
}

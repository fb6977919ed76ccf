package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

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

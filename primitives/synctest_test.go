package primitives_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The recommended way to unit-test code that holds leases: run it in a testing/synctest bubble
// over a memory store made inside the bubble. The store's clock (core.SystemClock{}), the lease's
// timer and refreshes, and waiters all follow the bubble's fake clock, which time.Sleep moves.

// TestSynctestLeaseExpiresAtItsDeadline: without refresh, a 10s lease is held until its
// deadline (10s less the drift allowance) and lost exactly then; the store frees the key at 10s.
func TestSynctestLeaseExpiresAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m, err := primitives.NewMutex(store, "job", primitives.WithTTL(10*time.Second), primitives.WithoutRefresh(), primitives.WithStopMargin(0))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		deadline := start.Add(10*time.Second - 10*time.Second/100 - 2*time.Millisecond)
		if !l.Deadline().Equal(deadline) {
			t.Errorf("Deadline %v, want %v", l.Deadline(), deadline)
		}
		time.Sleep(time.Until(deadline) - time.Nanosecond)
		synctest.Wait()
		select {
		case <-l.Done():
			t.Fatal("lease ended before its deadline")
		default:
		}
		<-l.Done()
		if now := time.Now(); !now.Equal(deadline) {
			t.Errorf("lost at %v, want at the deadline %v", now.Sub(start), deadline.Sub(start))
		}
		if !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", l.Err())
		}
		if _, err := m.TryAcquire(context.Background()); !errors.Is(err, core.ErrNotAcquired) {
			t.Errorf("TryAcquire before the store's expiry: %v, want ErrNotAcquired", err)
		}
		time.Sleep(time.Until(start.Add(10 * time.Second)))
		l2, err := m.TryAcquire(context.Background())
		if err != nil {
			t.Fatalf("TryAcquire at the store's expiry: %v", err)
		}
		if err := l2.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSynctestRefreshKeepsLeaseAliveForMinutes: refreshed every TTL/3, a 10s lease lives through
// ten minutes of fake time, and the key stays taken.
func TestSynctestRefreshKeepsLeaseAliveForMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m, err := primitives.NewMutex(store, "job", primitives.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			time.Sleep(time.Minute)
			if err := l.Err(); err != nil {
				t.Fatalf("lost while refreshed: %v", err)
			}
			if _, err := m.TryAcquire(context.Background()); !errors.Is(err, core.ErrNotAcquired) {
				t.Fatalf("TryAcquire of a refreshed lease: %v, want ErrNotAcquired", err)
			}
		}
		if left := time.Until(l.Deadline()); left <= 0 || left > 10*time.Second {
			t.Errorf("deadline %v away after ten minutes, want within the TTL", left)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSynctestUnreleasedLeaseDoesNotHoldTheBubble: a lease still held when the bubble's
// function returns leaves only a timer, which neither deadlocks nor leaks out of the bubble.
func TestSynctestUnreleasedLeaseDoesNotHoldTheBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		first := mustMutex(t, store, primitives.WithTTL(10*time.Second), primitives.WithoutRefresh())
		mustAcquire(t, first)
		// A waiter, which gets the lease once the first expires, and keeps it refreshed.
		got := acquireAsync(t, asSem{mustMutex(t, store, primitives.WithAcquireTimeout(time.Hour))}, 1)
		time.Sleep(time.Minute)
		if l := <-got; l.Err() != nil {
			t.Errorf("the waiter's lease: %v", l.Err())
		}
	})
}

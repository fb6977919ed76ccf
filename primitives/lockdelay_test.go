package primitives_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/primitives"
)

// TestLockDelayKeepsAStalledHoldersKeyClosed: a lease that expires unreleased keeps the key closed
// for the lock delay after its expiry; Inspect shows it and until when, and a waiter is granted
// when the delay ends, not before.
func TestLockDelayKeepsAStalledHoldersKeyClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		opts := []primitives.Option{primitives.WithTTL(time.Second), primitives.WithLockDelay(5 * time.Second), primitives.WithAcquireTimeout(time.Minute)}
		stalled := mustMutex(t, store, append(opts, primitives.WithoutRefresh())...)
		next := mustMutex(t, store, opts...)
		l := mustAcquire(t, stalled)
		began := time.Now()
		time.Sleep(time.Second) // the holder stalls past its TTL
		<-l.Done()
		if _, err := next.TryAcquire(context.Background()); !errors.Is(err, primitives.ErrNotAcquired) {
			t.Fatalf("TryAcquire during the lock delay: %v, want ErrNotAcquired", err)
		}
		st, err := next.Inspect(context.Background())
		if err != nil || len(st.Leases) != 0 || len(st.Delayed) != 1 || st.Closed != 1 || st.Free != 0 {
			t.Fatalf("Inspect during the lock delay: %+v, %v; want no lease, one delayed, 1 closed, 0 free", st, err)
		}
		if d := st.Delayed[0]; d.Holder != l.Holder() || d.Fence != l.Fence() || d.Left != 5*time.Second {
			t.Errorf("the delayed lease: %+v, want the stalled holder's (fence %d) with 5s left", d, l.Fence())
		}
		l2 := mustAcquire(t, next)
		defer mustRelease(t, l2)
		if got := time.Since(began); got < 6*time.Second || got > 6*time.Second+100*time.Millisecond {
			t.Errorf("the waiter was granted %v after the stalled holder's grant, want when the delay ends (6s)", got)
		}
		if l2.Fence() <= l.Fence() {
			t.Errorf("the next grant's fence %d, want above the stalled holder's %d", l2.Fence(), l.Fence())
		}
	})
}

// TestLockDelayNotAfterRelease: a lease released in time leaves the key open at once.
func TestLockDelayNotAfterRelease(t *testing.T) {
	store := memory.New()
	m := mustMutex(t, store, primitives.WithLockDelay(time.Hour))
	mustRelease(t, mustAcquire(t, m))
	l, err := m.TryAcquire(t.Context())
	if err != nil {
		t.Fatalf("TryAcquire after a release: %v, want granted", err)
	}
	mustRelease(t, l)
}

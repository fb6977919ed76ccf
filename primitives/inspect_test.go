package primitives_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestInspectReportsHoldersAndRoom(t *testing.T) {
	store := memory.New()
	sem := mustSemaphore(t, store, 5)
	ctx := t.Context()
	st, err := sem.Inspect(ctx)
	if err != nil || len(st.Leases) != 0 || st.InUse != 0 || st.Free != 5 || st.Limit != 5 {
		t.Fatalf("Inspect of an unused key: %+v, %v; want no holders and 5 free", st, err)
	}
	a, _ := sem.Acquire(ctx, 2)
	b, _ := sem.Acquire(ctx, 1)
	defer mustRelease(t, a)
	defer mustRelease(t, b)
	st, err = sem.Inspect(ctx)
	if err != nil || st.InUse != 3 || st.Free != 2 || len(st.Leases) != 2 {
		t.Fatalf("Inspect: %+v, %v; want 3 in use, 2 free, 2 leases", st, err)
	}
	if l := st.Leases[0]; l.Holder != a.Holder() || l.Permits != 2 || l.Fence != a.Fence() || l.TTL <= 0 || l.TTL > primitives.DefaultTTL {
		t.Errorf("first lease %+v, want a's: 2 permits, fence %d, TTL in (0, 10s]", l, a.Fence())
	}
	m := mustMutexOn(t, store, "other")
	if st, _ := m.Inspect(ctx); st.Limit != 1 || st.Free != 1 {
		t.Errorf("Mutex.Inspect of a free lock: %+v", st)
	}
}

func TestInspectNeverShowsExpiredHolders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustMutex(t, memory.New(), primitives.WithTTL(time.Second), primitives.WithoutRefresh())
		l := mustAcquire(t, m)
		time.Sleep(time.Second)
		if st, _ := m.Inspect(context.Background()); len(st.Leases) != 0 || st.Free != 1 {
			t.Errorf("Inspect after expiry: %+v, want nobody", st)
		}
		<-l.Done()
	})
}

func TestLeaseExtendMovesDeadlineAndStoreExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store, primitives.WithTTL(time.Second), primitives.WithoutRefresh())
		l := mustAcquire(t, m)
		deadline, err := l.Extend(context.Background(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Now().Add(time.Hour - time.Hour/100 - 2*time.Millisecond); !deadline.Equal(want) || !l.Deadline().Equal(want) {
			t.Errorf("deadline %v (Deadline() %v), want %v", deadline, l.Deadline(), want)
		}
		// Another process's view: a second Mutex over the same store.
		other := mustMutex(t, store)
		if st, _ := other.Inspect(context.Background()); len(st.Leases) != 1 || st.Leases[0].TTL != time.Hour {
			t.Errorf("another handle sees %+v, want one lease with 1h left", st.Leases)
		}
		time.Sleep(30 * time.Minute)
		if l.Err() != nil {
			t.Errorf("lease lost before its extended deadline: %v", l.Err())
		}
		// A shorter TTL shortens it.
		if _, err := l.Extend(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		<-l.Done()
		if !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("Err = %v, want ErrLost after the shortened TTL ran out", l.Err())
		}
	})
}

func TestLeaseExtendWithRefreshOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustMutex(t, memory.New(), primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		if _, err := l.Extend(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // refreshes continue at the configured TTL
		if l.Err() != nil {
			t.Errorf("lease lost: %v", l.Err())
		}
		mustRelease(t, l)
	})
}

func TestLeaseExtendOfLostLeaseNeverReacquires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store, primitives.WithTTL(time.Second), primitives.WithoutRefresh())
		l := mustAcquire(t, m)
		store.Release(context.Background(), core.ReleaseRequest{Key: "job", Holder: l.Holder()}) // taken away behind its back
		if _, err := l.Extend(context.Background(), time.Minute); !errors.Is(err, core.ErrLost) {
			t.Errorf("Extend of a lease the store no longer holds: %v, want ErrLost", err)
		}
		if !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("Err after a failed Extend = %v, want ErrLost", l.Err())
		}
		if st, _ := m.Inspect(context.Background()); len(st.Leases) != 0 {
			t.Errorf("Extend acquired again: %+v", st.Leases)
		}
		if _, err := l.Extend(context.Background(), time.Minute); !errors.Is(err, core.ErrLost) {
			t.Errorf("second Extend: %v, want ErrLost", err)
		}
	})
}

func TestLeaseExtendBadInput(t *testing.T) {
	rec := newRecorder()
	m := mustMutex(t, rec)
	l := mustAcquire(t, m)
	defer mustRelease(t, l)
	before := rec.calls()
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond, core.MaxDuration + 1, math.MaxInt64} {
		if _, err := l.Extend(t.Context(), ttl); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("Extend(%v): %v, want ErrInvalid", ttl, err)
		}
	}
	if rec.calls() != before {
		t.Errorf("bad input reached the store")
	}
}

func TestLeaseHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(time.Second), primitives.WithoutRefresh())
		l := mustAcquire(t, m)
		before := rec.inspects.Load()
		if ok, err := l.Held(context.Background()); !ok || err != nil {
			t.Errorf("Held of a fresh lease: %v, %v", ok, err)
		}
		if n := rec.inspects.Load() - before; n != 1 {
			t.Errorf("Held made %d store calls, want 1", n)
		}
		time.Sleep(time.Second)
		if ok, err := l.Held(context.Background()); ok || err != nil {
			t.Errorf("Held after expiry without refresh: %v, %v; want false", ok, err)
		}
		<-l.Done()
	})
}

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
		assertOnLostOnce(t, &calls)
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

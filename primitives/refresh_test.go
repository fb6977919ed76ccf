package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

func TestRefreshFailuresLoseLeaseAtItsStopMargin(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   []primitives.Option
		margin time.Duration
	}{
		{"default, a tenth of the TTL", nil, 300 * time.Millisecond},
		{"500ms", []primitives.Option{primitives.WithStopMargin(500 * time.Millisecond)}, 500 * time.Millisecond},
		{"none", []primitives.Option{primitives.WithStopMargin(0)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				m := mustMutex(t, rec, append([]primitives.Option{primitives.WithTTL(3 * time.Second)}, c.opts...)...)
				l := mustAcquire(t, m)
				deadline := l.Deadline()
				rec.failExtends(errNetwork)
				<-l.Done()
				if now, at := time.Now(), deadline.Add(-c.margin); now.Before(at) || now.After(at.Add(time.Millisecond)) {
					t.Errorf("lost at %v, want %v before the deadline %v", now, c.margin, deadline)
				}
				if err := l.Err(); !errors.Is(err, core.ErrLost) {
					t.Errorf("Err = %v, want ErrLost", err)
				}
				if n := rec.extends.Load(); n < 2 {
					t.Errorf("%d refresh attempts before the loss, want retries", n)
				}
				if err := l.Release(context.Background()); !errors.Is(err, core.ErrLost) {
					t.Errorf("Release = %v, want ErrLost", err)
				}
			})
		})
	}
}

// TestStopMarginCancelsWorkBeforeTheDeadline: refreshes failing on a 1.2 s TTL with a 400 ms
// stop margin cancel the lease's context 400 ms before its Deadline, while the store still
// holds the lease: the work has that long to stop before another holder can be granted.
func TestStopMarginCancelsWorkBeforeTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(1200*time.Millisecond), primitives.WithStopMargin(400*time.Millisecond))
		l := mustAcquire(t, m)
		ctx, cancel := primitives.LeaseContext(context.Background(), l)
		defer cancel()
		rec.failExtends(errNetwork)
		<-ctx.Done()
		if left := time.Until(l.Deadline()); left < 400*time.Millisecond {
			t.Errorf("the lease's context ended %v before its deadline, want 400ms", left)
		}
		if !errors.Is(context.Cause(ctx), core.ErrLost) {
			t.Errorf("cause %v, want ErrLost", context.Cause(ctx))
		}
	})
}

func TestStopMarginOfHalfTheTTLIsInvalid(t *testing.T) {
	for _, opts := range [][]primitives.Option{
		{primitives.WithTTL(time.Second), primitives.WithStopMargin(500 * time.Millisecond)},
		{primitives.WithStopMargin(-time.Millisecond)},
	} {
		if _, err := primitives.NewMutex(memory.New(), "k", opts...); !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "stop margin") {
			t.Errorf("NewMutex: %v, want ErrInvalid naming the stop margin", err)
		}
	}
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

// TestLossAfterFailedRefreshesNamesTheLastError: a lease lost at its deadline because its
// refreshes failed says so in one line, with how many failed and the last one's error, which
// errors.Is finds beside ErrLost.
func TestLossAfterFailedRefreshesNamesTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		rec.failExtends(errNetwork)
		<-l.Done()
		err := l.Err()
		if !errors.Is(err, core.ErrLost) || !errors.Is(err, errNetwork) {
			t.Errorf("Err = %v, want ErrLost and the refresh's error", err)
		}
		want := fmt.Sprintf(`leasehold: hold "job": lease lost: %d refreshes failed, last: network unreachable`, rec.extends.Load())
		if err == nil || err.Error() != want {
			t.Errorf("Err = %q, want %q", err, want)
		}
		l.Release(context.Background())
	})
}

// lateExtends is a store whose refreshes reach it only as the caller stops waiting (a reply
// lost on a slow network): each Extend waits for ctx to end, then extends the lease for a full
// TTL and returns ctx's error.
type lateExtends struct{ *recorder }

func (s lateExtends) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	s.extends.Add(1)
	<-ctx.Done()
	s.inner.Extend(context.Background(), req)
	return core.ExtendResult{}, ctx.Err()
}

// TestLeaseLostAtItsDeadlineIsReleasedInTheStore: a refresh that reached the store after the
// lease's deadline keeps the key held for a TTL by a holder that has given it up; the lease,
// lost, releases it in the background, so the key is free at once, and Release then finds the
// loss without waiting for anything more.
func TestLeaseLostAtItsDeadlineIsReleasedInTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := lateExtends{newRecorder()}
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		<-l.Done()
		if err := l.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Err = %v, want the refresh's deadline", err)
		}
		synctest.Wait() // the release in the background
		if snap, _ := store.inner.Inspect(context.Background(), "job"); len(snap.Leases) != 0 {
			t.Errorf("the store holds %+v after the loss, want nothing", snap.Leases)
		}
		other := mustMutex(t, store.inner)
		if l2, err := other.TryAcquire(context.Background()); err != nil {
			t.Errorf("TryAcquire after the loss: %v", err)
		} else {
			mustRelease(t, l2)
		}
		if err := l.Release(context.Background()); !errors.Is(err, core.ErrLost) {
			t.Errorf("Release = %v, want ErrLost", err)
		}
	})
}

// TestStoppedLeaseLostAtItsDeadlineIsLeftInTheStore: after StopRefresh the lease is another's
// to keep (Adopt), so its loss at the deadline sends no release, even after failed refreshes.
func TestStoppedLeaseLostAtItsDeadlineIsLeftInTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		rec.failExtends(errNetwork)
		time.Sleep(1500 * time.Millisecond) // a refresh failed
		rec.failExtends(nil)
		l.StopRefresh()
		<-l.Done()
		synctest.Wait()
		if n := rec.releases.Load(); n != 0 {
			t.Errorf("%d releases after StopRefresh, want none", n)
		}
		l.Release(context.Background())
	})
}

// failThenHang is a store whose Extends fail with errNetwork once, then get no reply until
// their ctx ends.
type failThenHang struct {
	*recorder
	failed atomic.Bool
}

func (s *failThenHang) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	s.extends.Add(1)
	if s.failed.CompareAndSwap(false, true) {
		return core.ExtendResult{}, errNetwork
	}
	<-ctx.Done()
	return core.ExtendResult{}, ctx.Err()
}

// TestLossNamesTheFailureBeforeTheRefreshCutOffByTheDeadline: the refresh in flight at the
// deadline fails by the deadline alone; the loss names the error that came before it.
func TestLossNamesTheFailureBeforeTheRefreshCutOffByTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustMutex(t, &failThenHang{recorder: newRecorder()}, primitives.WithTTL(3*time.Second))
		l := mustAcquire(t, m)
		<-l.Done()
		want := `leasehold: hold "job": lease lost: 2 refreshes failed, last: network unreachable`
		if err := l.Err(); err == nil || err.Error() != want || !errors.Is(err, errNetwork) {
			t.Errorf("Err = %v, want %q", err, want)
		}
		l.Release(context.Background())
	})
}

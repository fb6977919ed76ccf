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

func TestDoRunsUnderTheLeaseAndReleases(t *testing.T) {
	store := memory.New()
	m := mustMutex(t, store)
	errWork := errors.New("work failed")
	err := m.Do(t.Context(), func(ctx context.Context, _ core.Lease) error {
		if st, _ := m.Inspect(ctx); st.InUse != 1 {
			t.Errorf("inside Do: %d in use, want 1", st.InUse)
		}
		return errWork
	})
	if !errors.Is(err, errWork) {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	if st, _ := m.Inspect(t.Context()); st.InUse != 0 {
		t.Errorf("after Do: %d in use, want 0", st.InUse)
	}
}

func TestDoHandsFnTheHeldLease(t *testing.T) {
	type doFunc func(context.Context, func(context.Context, core.Lease) error) error
	for _, tc := range []struct {
		name    string
		key     string
		permits int
		// setup returns Do on store, after taking and keeping any other lease the case wants
		// beside fn's, so that fn's lease must be told apart by its holder.
		setup func(t *testing.T, store core.Store) doFunc
	}{
		{name: "mutex", key: "job", permits: 1, setup: func(t *testing.T, store core.Store) doFunc {
			m := mustMutex(t, store)
			mustRelease(t, mustAcquire(t, m)) // an earlier grant, so fn's fence is not the first
			return m.Do
		}},
		{name: "semaphore", key: "pool", permits: 2, setup: func(t *testing.T, store core.Store) doFunc {
			s := mustSemaphore(t, store, 3)
			other, err := s.Acquire(t.Context(), 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mustRelease(t, other) })
			return func(ctx context.Context, fn func(context.Context, core.Lease) error) error {
				return s.Do(ctx, 2, fn)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memory.New()
			do := tc.setup(t, store)
			before, err := store.Inspect(t.Context(), tc.key)
			if err != nil {
				t.Fatal(err)
			}
			var got core.Lease
			err = do(t.Context(), func(ctx context.Context, lease core.Lease) error {
				got = lease
				snap, err := store.Inspect(ctx, tc.key)
				if err != nil {
					return err
				}
				var mine []core.LeaseInfo
				for _, li := range snap.Leases {
					if li.Holder == lease.Holder() {
						mine = append(mine, li)
					}
				}
				if len(mine) != 1 || mine[0].Fence != lease.Fence() || mine[0].Permits != tc.permits ||
					lease.Permits() != tc.permits || lease.Key() != tc.key {
					t.Errorf("inside Do: fn's lease is %q holder %s, %d permits, fence %d; the store holds %+v",
						lease.Key(), lease.Holder(), lease.Permits(), lease.Fence(), snap.Leases)
				}
				if len(snap.Leases) != len(before.Leases)+1 {
					t.Errorf("inside Do: %d leases, want %d", len(snap.Leases), len(before.Leases)+1)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if got == nil {
				t.Fatal("fn did not run")
			}
			select {
			case <-got.Done(): // Release has returned, so the lease has ended
			default:
				t.Error("after Do: fn's lease has not ended")
			}
			if err := got.Err(); err != nil {
				t.Errorf("after Do: fn's lease Err = %v, want nil (a clean release)", err)
			}
			after, err := store.Inspect(t.Context(), tc.key)
			if err != nil {
				t.Fatal(err)
			}
			for _, li := range after.Leases {
				if li.Holder == got.Holder() {
					t.Errorf("after Do: the store still holds fn's lease %+v", li)
				}
			}
			if len(after.Leases) != len(before.Leases) {
				t.Errorf("after Do: %d leases, want %d as before", len(after.Leases), len(before.Leases))
			}
		})
	}
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	store := memory.New()
	m := mustMutex(t, store)
	var got core.Lease
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want fn's panic to go on", r)
			}
		}()
		m.Do(t.Context(), func(_ context.Context, lease core.Lease) error {
			got = lease
			panic("boom")
		})
	}()
	if got == nil {
		t.Fatal("fn did not run")
	}
	select {
	case <-got.Done(): // the release returned before the panic went on
	default:
		t.Error("after a panicking fn: its lease has not ended")
	}
	if snap, _ := store.Inspect(t.Context(), "job"); len(snap.Leases) != 0 {
		t.Errorf("after a panicking fn: the store holds %+v, want nothing", snap.Leases)
	}
}

func TestDoCancelsOnLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second))
		err := m.Do(context.Background(), func(ctx context.Context, _ core.Lease) error {
			snap, _ := store.Inspect(ctx, "job")
			store.Release(ctx, core.ReleaseRequest{Key: "job", Holder: snap.Leases[0].Holder}) // taken away behind its back
			<-ctx.Done()
			if cause := context.Cause(ctx); !errors.Is(cause, core.ErrLost) {
				t.Errorf("cause = %v, want ErrLost", cause)
			}
			return ctx.Err()
		})
		if !errors.Is(err, core.ErrLost) || !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v, want fn's cancellation joined with the release's ErrLost", err)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("Do = %q, want one line", err)
		}
	})
}

func TestDoAcquireFailure(t *testing.T) {
	sem := mustSemaphore(t, memory.New(), 2)
	ran := false
	err := sem.Do(t.Context(), 3, func(context.Context, core.Lease) error { ran = true; return nil })
	if !errors.Is(err, core.ErrInvalid) || ran {
		t.Errorf("Do with too many permits: %v, ran %v", err, ran)
	}
}

func TestLeaseContextEndsWithRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustMutex(t, memory.New())
		l := mustAcquire(t, m)
		ctx, cancel := primitives.LeaseContext(context.Background(), l)
		defer cancel()
		mustRelease(t, l)
		<-ctx.Done()
		if c := context.Cause(ctx); !errors.Is(c, context.Canceled) || errors.Is(c, core.ErrLost) {
			t.Errorf("cause after a clean release = %v, want context.Canceled", c)
		}
	})
}

type fnError struct{ msg string }

func (e *fnError) Error() string { return e.msg }

// TestDoReturnsFnsErrorItself: after a clean release, Do returns fn's error as it is, so that
// a caller comparing with == or asserting its type sees it (errors.Join would wrap it).
func TestDoReturnsFnsErrorItself(t *testing.T) {
	m := mustMutex(t, newRecorder())
	want := &fnError{"work failed"}
	err := m.Do(t.Context(), func(context.Context, core.Lease) error { return want })
	if e, ok := err.(*fnError); !ok || e != want {
		t.Errorf("Do = %#v, want fn's error itself", err)
	}
}

// TestDoJoinsFnAndReleaseErrors: a failed release is reported beside fn's error, in one line,
// both visible to errors.Is, and the lease is left unrefreshed, to end as lost at its deadline.
func TestDoJoinsFnAndReleaseErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newRecorder()
		errStore := errors.New("store down")
		store.releaseErr = errStore
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second))
		errWork := errors.New("work failed")
		var got core.Lease
		err := m.Do(t.Context(), func(_ context.Context, l core.Lease) error { got = l; return errWork })
		if !errors.Is(err, errWork) || !errors.Is(err, errStore) {
			t.Errorf("Do = %v, want both fn's and the release's errors", err)
		}
		if want := `work failed; leasehold: release "job": store down`; err == nil || err.Error() != want {
			t.Errorf("Do = %q, want %q", err, want)
		}
		extends := store.extends.Load()
		<-got.Done() // at its deadline
		if !errors.Is(got.Err(), core.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", got.Err())
		}
		if n := store.extends.Load(); n != extends {
			t.Errorf("%d refreshes after Do returned, want none", n-extends)
		}
	})
}

// TestDoReleasesWhenCtxEnds: ctx ending while fn runs cancels fn's ctx, and the release is still
// sent (not with the canceled ctx).
func TestDoReleasesWhenCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newRecorder()
		m := mustMutex(t, store)
		ctx, cancel := context.WithCancel(context.Background())
		err := m.Do(ctx, func(ctx context.Context, _ core.Lease) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, core.ErrLost) {
			t.Errorf("Do = %v, want context.Canceled alone", err)
		}
		if snap, _ := store.Inspect(context.Background(), "job"); len(snap.Leases) != 0 || store.releases.Load() != 1 {
			t.Errorf("after Do: %d releases, the store holds %+v", store.releases.Load(), snap.Leases)
		}
	})
}

// TestDoLeaseAfterReturn: the lease fn kept is ended once Do returns: it cannot be extended back
// to life, and Release on it is a no-op.
func TestDoLeaseAfterReturn(t *testing.T) {
	store := newRecorder()
	m := mustMutex(t, store)
	var kept core.Lease
	if err := m.Do(t.Context(), func(_ context.Context, l core.Lease) error { kept = l; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Extend(t.Context(), time.Minute); !errors.Is(err, core.ErrNotHeld) {
		t.Errorf("Extend after Do = %v, want ErrNotHeld", err)
	}
	if err := kept.Release(t.Context()); err != nil {
		t.Errorf("Release after Do = %v, want nil", err)
	}
	if snap, _ := store.Inspect(t.Context(), "job"); len(snap.Leases) != 0 {
		t.Errorf("the store holds %+v", snap.Leases)
	}
}

// TestMultiLockDoRunsUnderEveryKeyAndReleases: fn runs while the store holds every key for the
// MultiLease's holders, and every key is free once Do returns fn's error.
func TestMultiLockDoRunsUnderEveryKeyAndReleases(t *testing.T) {
	store := memory.New()
	keys := []string{"b", "a", "c"}
	ml := mustMultiLock(t, store, keys)
	errWork := errors.New("work failed")
	ran := false
	err := ml.Do(t.Context(), func(ctx context.Context, ms *primitives.MultiLease) error {
		ran = true
		for _, l := range ms.Leases() {
			snap, err := store.Inspect(ctx, l.Key())
			if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != l.Holder() || snap.Leases[0].Fence != l.Fence() {
				t.Errorf("inside Do, key %q: %+v, %v; want held by fn's lease", l.Key(), snap.Leases, err)
			}
		}
		return errWork
	})
	if !ran || err != errWork {
		t.Errorf("Do = %v (fn ran: %v), want fn's error itself", err, ran)
	}
	for _, k := range keys {
		if snap, _ := store.Inspect(t.Context(), k); len(snap.Leases) != 0 {
			t.Errorf("after Do, key %q: %+v, want released", k, snap.Leases)
		}
	}
}

// TestMultiLockDoCancelsOnTheLossOfAnyKey: a member lost while fn runs cancels fn's ctx with a
// cause wrapping ErrLost that names the key, and Do reports the loss beside fn's error.
func TestMultiLockDoCancelsOnTheLossOfAnyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		ml := mustMultiLock(t, store, []string{"a", "b"}, primitives.WithTTL(3*time.Second))
		err := ml.Do(context.Background(), func(ctx context.Context, ms *primitives.MultiLease) error {
			b := ms.Leases()[1]
			store.Release(ctx, core.ReleaseRequest{Key: b.Key(), Holder: b.Holder(), Fence: b.Fence()}) // taken away behind its back
			<-ctx.Done()
			if cause := context.Cause(ctx); !errors.Is(cause, core.ErrLost) || !strings.Contains(cause.Error(), `"b"`) {
				t.Errorf("cause = %v, want ErrLost naming key b", cause)
			}
			return ctx.Err()
		})
		if !errors.Is(err, core.ErrLost) || !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v, want fn's cancellation joined with the loss", err)
		}
		synctest.Wait()
		if snap, _ := store.Inspect(context.Background(), "a"); len(snap.Leases) != 0 {
			t.Errorf("key a after Do: %+v, want released", snap.Leases)
		}
	})
}

// TestMultiLockDoHoldsNothingWhenTheAcquireFails: a key held elsewhere past the acquire timeout
// fails Do with ErrNotAcquired, fn never runs, and the keys taken before are released.
func TestMultiLockDoHoldsNothingWhenTheAcquireFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		other := mustAcquire(t, mustMutexOn(t, store, "b"))
		defer mustRelease(t, other)
		ml := mustMultiLock(t, store, []string{"a", "b"}, primitives.WithAcquireTimeout(time.Second))
		ran := false
		err := ml.Do(context.Background(), func(context.Context, *primitives.MultiLease) error { ran = true; return nil })
		if !errors.Is(err, core.ErrNotAcquired) || ran {
			t.Errorf("Do with b held elsewhere = %v (fn ran: %v), want ErrNotAcquired and no run", err, ran)
		}
		if snap, _ := store.Inspect(context.Background(), "a"); len(snap.Leases) != 0 {
			t.Errorf("key a after the failed Do: %+v, want released", snap.Leases)
		}
	})
}

// TestLeaseContextOfAMultiLease: the context ends with the MultiLease: context.Canceled after a
// release, a cause wrapping ErrLost naming the key after a member's loss.
func TestLeaseContextOfAMultiLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		ml := mustMultiLock(t, store, []string{"a", "b"})

		ms, err := ml.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := primitives.LeaseContext(context.Background(), ms)
		defer cancel()
		if err := ms.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		if c := context.Cause(ctx); !errors.Is(c, context.Canceled) || errors.Is(c, core.ErrLost) {
			t.Errorf("cause after a clean release = %v, want context.Canceled", c)
		}

		ms, err = ml.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel = primitives.LeaseContext(context.Background(), ms)
		defer cancel()
		a := ms.Leases()[0]
		store.Release(context.Background(), core.ReleaseRequest{Key: a.Key(), Holder: a.Holder(), Fence: a.Fence()})
		<-ctx.Done()
		if c := context.Cause(ctx); !errors.Is(c, core.ErrLost) || !strings.Contains(c.Error(), `"a"`) {
			t.Errorf("cause after key a was taken = %v, want ErrLost naming a", c)
		}
		ms.Release(context.Background())
	})
}

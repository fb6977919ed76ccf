package primitives_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

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

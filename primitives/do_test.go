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

func TestDoRunsUnderTheLeaseAndReleases(t *testing.T) {
	store := memory.New()
	m := mustMutex(t, store)
	errWork := errors.New("work failed")
	err := m.Do(t.Context(), func(ctx context.Context) error {
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

func TestDoCancelsOnLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second))
		err := m.Do(context.Background(), func(ctx context.Context) error {
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
	})
}

func TestDoAcquireFailure(t *testing.T) {
	sem := mustSemaphore(t, memory.New(), 2)
	ran := false
	err := sem.Do(t.Context(), 3, func(context.Context) error { ran = true; return nil })
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

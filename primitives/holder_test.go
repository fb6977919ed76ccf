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

package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// countingStore counts the calls that reach the store.
type countingStore struct {
	core.Store
	calls int
}

func (c *countingStore) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	c.calls++
	return c.Store.Acquire(ctx, req)
}

func TestValueTooLongIsRefusedBeforeAnyCall(t *testing.T) {
	st := &countingStore{Store: memory.New()}
	long := strings.Repeat("v", core.MaxValueLen+1)
	_, err := primitives.NewMutex(st, "k", primitives.WithValue(long))
	if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "value of 1025 bytes: must be at most 1024") {
		t.Fatalf("NewMutex with a 1025-byte value: %v, want ErrInvalid naming the value", err)
	}
	for _, mk := range []func() error{
		func() error { _, err := primitives.NewSemaphore(st, "k", 2, primitives.WithValue(long)); return err },
		func() error { _, err := primitives.NewRWMutex(st, "k", primitives.WithValue(long)); return err },
	} {
		if err := mk(); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("constructor with a 1025-byte value: %v, want ErrInvalid", err)
		}
	}
	el, err := primitives.NewElection(st, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := el.Campaign(t.Context(), long); !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), `leasehold: campaign "k": invalid argument: value of 1025`) {
		t.Errorf("Campaign with a 1025-byte value: %v, want ErrInvalid naming the value", err)
	}
	if st.calls != 0 {
		t.Errorf("%d Acquire calls reached the store; want none", st.calls)
	}
}

func TestLeaseCarriesItsValue(t *testing.T) {
	ctx := t.Context()
	store := memory.New()
	max := strings.Repeat("v", core.MaxValueLen)
	sem, err := primitives.NewSemaphore(store, "k", 3, primitives.WithValue(max))
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Value() != max {
		t.Errorf("Lease.Value() has %d bytes, want the %d-byte value", len(l.Value()), len(max))
	}
	adopted, err := sem.Adopt(ctx, l.Holder())
	if err != nil {
		t.Fatal(err)
	}
	if adopted.Value() != max {
		t.Errorf("an adopted lease's Value() has %d bytes, want the store's %d", len(adopted.Value()), len(max))
	}
	st, err := sem.Inspect(ctx)
	if err != nil || len(st.Leases) != 1 || st.Leases[0].Value != max {
		t.Fatalf("Inspect = %+v, %v; want the lease with its value", st, err)
	}
}

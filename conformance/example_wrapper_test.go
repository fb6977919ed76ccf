package conformance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// notifyingStore is what prefixStore wraps: a Store with notifications.
type notifyingStore interface {
	core.Store
	core.Notifier
}

// prefixStore is a driver that wraps another: it keeps every key under a prefix, so tenants
// sharing one backend never meet. It is written from the docs of core.Store, core.Notifier and
// core.Wake alone, and proves itself with one conformance.Run call (TestPrefixStore).
//
// It forwards Register, so its waiters are woken by the wrapped store's releases; a wrapper that
// dropped it would leave them polling, and conformance.Run would say so. It does not forward
// core.FenceRaiser, so it cannot be a Redlock node: redlock.New refuses it.
type prefixStore struct {
	inner  notifyingStore
	prefix string
}

var (
	_ core.Store    = (*prefixStore)(nil)
	_ core.Notifier = (*prefixStore)(nil)
)

// The portable layer has checked every argument, so the wrapper only renames the key.

func (s *prefixStore) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	req.Key = s.prefix + req.Key
	return s.inner.Acquire(ctx, req)
}

func (s *prefixStore) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	req.Key = s.prefix + req.Key
	return s.inner.Extend(ctx, req)
}

func (s *prefixStore) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	req.Key = s.prefix + req.Key
	return s.inner.Release(ctx, req)
}

func (s *prefixStore) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	return s.inner.Inspect(ctx, s.prefix+key)
}

// Register enrolls in the wrapped store's line under the same renamed key as the refused
// Acquire, so the release that grants the caller wakes it.
func (s *prefixStore) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	req.Key = s.prefix + req.Key
	return s.inner.Register(ctx, req)
}

// prefixHarness connects the suite to prefixStore: every Store it returns wraps the one memory
// store, on a clock the suite moves.
type prefixHarness struct {
	clock *core.ManualClock
	inner *memory.Store
}

func newPrefixHarness() prefixHarness {
	clock := core.NewManualClock(time.Now())
	return prefixHarness{clock: clock, inner: memory.New(memory.WithClock(clock))}
}

func (h prefixHarness) NewStore(*testing.T) core.Store {
	return &prefixStore{inner: h.inner, prefix: "tenant-a/"}
}

func (h prefixHarness) Advance(d time.Duration) bool {
	h.clock.Advance(d)
	return true
}

// A Store that wraps another: the primitives run on it unchanged, and the wrapped store sees the
// renamed key. The conformance hookup is one line in the driver's tests:
//
//	func TestPrefixStore(t *testing.T) { conformance.Run(t, newPrefixHarness()) }
func Example_wrapperStore() {
	ctx := context.Background()
	inner := memory.New()
	mu, err := primitives.NewMutex(&prefixStore{inner: inner, prefix: "tenant-a/"}, "report")
	if err != nil {
		panic(err)
	}
	lease, err := mu.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	snap, _ := inner.Inspect(ctx, "tenant-a/report")
	fmt.Println(len(snap.Leases), snap.Leases[0].Holder == lease.Holder())
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
	snap, _ = inner.Inspect(ctx, "tenant-a/report")
	fmt.Println(len(snap.Leases))
	// Output:
	// 1 true
	// 0
}

package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/primitives"
)

// TestLostLeaseReleaseEndsNoLaterGrant: under WithHolder, a lease lost at its local deadline
// (TTL 200 ms, not refreshed) is still alive in etcd, whose leases last whole seconds; the same
// holder's next Acquire is granted then. The lost lease's Release, after that, must not end the
// new grant: no other Mutex takes the key while the new lease holds.
func TestLostLeaseReleaseEndsNoLaterGrant(t *testing.T) {
	t.Parallel()
	st, key := newStore(t), uniqueKey(t)
	ctx := context.Background()
	m, err := primitives.NewMutex(st, key, primitives.WithHolder("h"), primitives.WithTTL(200*time.Millisecond), primitives.WithoutRefresh())
	if err != nil {
		t.Fatal(err)
	}
	l1, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-l1.Done()
	l2, err := primitives.NewMutex(st, key, primitives.WithHolder("h"), primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l2l, err := l2.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l2l.Release(ctx)
	l1.Release(ctx) // reports the loss
	other, err := primitives.NewMutex(newStore(t), key, primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lo, err := other.TryAcquire(ctx)
	if err == nil {
		defer lo.Release(ctx)
		if l2l.Err() == nil {
			t.Fatalf("another Mutex took the key (fence %d) while the holder's new lease (fence %d) holds it; the lost lease's (fence %d) Release ended it",
				lo.Fence(), l2l.Fence(), l1.Fence())
		}
	}
}

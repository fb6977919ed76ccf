package etcd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestReusedLeaseOwesNothingToItsLastGrant: the etcd lease of a released grant carries the
// Store's next grant of the same TTL; the released holder's Extend finds its lease gone, and
// the new grant lives its own TTL.
func TestReusedLeaseOwesNothingToItsLastGrant(t *testing.T) {
	t.Parallel()
	st, key := newStore(t), uniqueKey(t)
	ctx := t.Context()
	a := mustAcquire(t, st, req(key, "a", 1, 1))
	if ok, err := st.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: a.Fence}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	b := mustAcquire(t, st, req(key, "b", 1, 1))
	if b.Fence <= a.Fence {
		t.Errorf("b's fence %d is not above a's %d", b.Fence, a.Fence)
	}
	if _, err := st.Extend(ctx, core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
		t.Errorf("Extend of a's released lease: %v, want ErrLost", err)
	}
	snap, err := st.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" || snap.Leases[0].TTL < 30*time.Second {
		t.Fatalf("Inspect = %+v, %v; want b's lease alone, with most of its minute left", snap, err)
	}
}

// TestSpareThatEndedIsNotUsed: a released grant's etcd lease kept past its TTL has ended; the
// next grant of that TTL gets a live one and holds for its TTL.
func TestSpareThatEndedIsNotUsed(t *testing.T) {
	testenv.SkipShort(t, "waits out a TTL of a second")
	t.Parallel()
	srv := etcdtest.Start(t) // a server of its own, whose leases are this test's alone
	st, c, key := storeOn(t, srv), srv.Client(t), uniqueKey(t)
	ctx := t.Context()
	r := req(key, "a", 1, 1)
	r.TTL = time.Second
	a := mustAcquire(t, st, r)
	if ok, err := st.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: a.Fence}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	poll.Within(t, 10*time.Second, "the released grant's etcd lease, kept as a spare, ending at its TTL", func() (struct{}, bool) {
		ls, err := c.Leases(ctx)
		return struct{}{}, err == nil && len(ls.Leases) == 0
	})
	r.Holder = "b"
	mustAcquire(t, st, r)
	// Held now, and for about its second: not gone with an ended lease.
	if !holds(t, st, key, "b") {
		t.Fatal("b's grant is not held")
	}
	poll.Within(t, 10*time.Second, "b's lease ending at its TTL", func() (struct{}, bool) {
		return struct{}{}, !holds(t, st, key, "b")
	})
}

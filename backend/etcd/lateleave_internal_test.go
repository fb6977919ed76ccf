package etcd

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
)

// TestLateLeaveSparesTheHolderNewerPlaceAndGrant: under a holder id its callers share, a try
// with a Wait fails in flight, and the Store leaves for it in the background, once at once and
// once more a second later (the try may reach etcd late). The same holder then tries again,
// is told it waits, ahead of another waiter, and the key is released: the line grants it. The
// leave, run after, must take neither the place the holder was told it keeps nor the grant the
// line made it: the key's lease is the holder's, and the other waiter still waits.
func TestLateLeaveSparesTheHolderNewerPlaceAndGrant(t *testing.T) {
	t.Parallel()
	s, err := New(etcdtest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	key := fmt.Sprint(t.Name(), rand.Int64()) // -count: not a run's before
	req := func(holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	}
	if res, err := s.Acquire(ctx, req("a")); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	s.leaveInBackground(key, "shared", true) // a try of the holder failed in flight
	if res, err := s.Acquire(ctx, req("shared")); err != nil || res.Granted {
		t.Fatalf("the shared holder's next try: %+v, %v; want refused, waiting", res, err)
	}
	if res, err := s.Acquire(ctx, req("c")); err != nil || res.Granted {
		t.Fatalf("Acquire(c): %+v, %v; want refused, waiting", res, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	if err := s.leaves.AwaitHolder(ctx, key, "shared"); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Leases) != 1 || snap.Leases[0].Holder != "shared" || len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "c" {
		t.Errorf("leases %+v, waiters %+v; want the shared holder's lease, granted by the line, and c waiting", snap.Leases, snap.Waiters)
	}
}

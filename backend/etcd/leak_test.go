package etcd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leftOver waits for the server to hold no etcd lease and no record under the default prefix,
// once every Store on it is closed and every lease released.
func leftOver(t *testing.T, c *clientv3.Client) {
	t.Helper()
	poll.Within(t, 10*time.Second, "no etcd lease and no record left", func() (string, bool) {
		ls, err := c.Leases(context.Background())
		if err != nil {
			return err.Error(), false
		}
		recs, err := c.Get(context.Background(), etcd.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err.Error(), false
		}
		return "", len(ls.Leases) == 0 && recs.Count == 0
	})
}

// A workload of grants, waits, grants of the line taken and given back, releases and leaves,
// then Close, leaves no etcd lease and no record behind.
func TestWorkloadLeavesNoLeaseAndNoRecord(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	a, err := etcd.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := etcd.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k1", "k2"} {
		r := req(key, "h", 1, 2)
		r.LockDelay = time.Minute
		h := mustAcquire(t, a, r)
		mustAcquire(t, a, r) // again: the same lease on new etcd leases
		o := mustAcquire(t, b, req(key, "o", 1, 2))
		taker := mustWait(t, b, req(key, "w", 1, 2))
		giver := mustWait(t, a, req(key, "g", 1, 2))
		if ok, err := a.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
			t.Fatalf("Release(h) = %v, %v", ok, err)
		}
		waitWoken(t, taker)
		wg := mustAcquire(t, b, req(key, "w", 1, 2))
		taker.Close()
		if ok, err := b.Release(ctx, core.ReleaseRequest{Key: key, Holder: "o", Fence: o.Fence}); err != nil || !ok {
			t.Fatalf("Release(o) = %v, %v", ok, err)
		}
		waitWoken(t, giver)
		giver.Close() // gives its grant back
		if _, err := b.Extend(ctx, core.ExtendRequest{Key: key, Holder: "w", TTL: 2 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		if ok, err := b.Release(ctx, core.ReleaseRequest{Key: key, Holder: "w", Fence: wg.Fence}); err != nil || !ok {
			t.Fatalf("Release(w) = %v, %v", ok, err)
		}
	}
	a.Close()
	b.Close()
	leftOver(t, c)
}

// Idempotent re-acquires of one holder through two Stores at once each move the lease onto etcd
// leases of their own; the ones no record ends on are revoked, not left to their TTL.
func TestConcurrentReacquiresLeaveNoLease(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	a, err := etcd.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := etcd.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	r := req("k", "h", 1, 1)
	r.TTL = time.Hour
	r.LockDelay = time.Hour
	h := mustAcquire(t, a, r)
	var wg sync.WaitGroup
	for _, s := range []*etcd.Store{a, b} {
		wg.Go(func() {
			for range 20 {
				if res, err := s.Acquire(ctx, r); err != nil || !res.Granted || res.Fence != h.Fence {
					t.Errorf("re-acquire = %+v, %v; want the grant of fence %d again", res, err, h.Fence)
					return
				}
			}
		})
	}
	wg.Wait()
	if ok, err := a.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	a.Close()
	b.Close()
	leftOver(t, c)
}

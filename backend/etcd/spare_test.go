package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"

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

// TestAcquireCutInFlightSharesNoEtcdLease: acquires whose ctx ends while they are in flight
// (0.2 to 4 ms) may be granted unknown to their callers. The etcd lease such a grant is on
// carries no other grant (the Store's next grants of the same TTL take none of them), whether
// the try is given back as primitives does (a drawn holder: a Release of any fence) or not; so
// do Extends with another TTL cut in flight. The Store's Close, which revokes its spares, ends
// no lease reported granted.
func TestAcquireCutInFlightSharesNoEtcdLease(t *testing.T) {
	t.Parallel()
	prefix := uniqueKey(t) + "/"
	c := etcdClient(t)
	s, err := etcd.New(etcdtest.Shared(t).Client(t), etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 200*time.Microsecond+rand.N(3800*time.Microsecond))
	}
	const tries = 120
	var granted []string // the keys of the grants reported, each held by "h"
	var cut []core.AcquireRequest
	for i := range tries {
		r := req(fmt.Sprint("try", i), "h", 1, 1)
		r.Unshared = i%2 == 0
		tctx, cancel := short()
		res, err := s.Acquire(tctx, r)
		cancel()
		switch {
		case err != nil:
			cut = append(cut, r)
		case res.Granted:
			granted = append(granted, r.Key)
		}
	}
	t.Logf("%d of %d tries cut in flight", len(cut), tries)
	// The next grants of the same TTL take the Store's spares.
	for i := range tries {
		next := req(fmt.Sprint("next", i), "h", 1, 1)
		mustAcquire(t, s, next)
		granted = append(granted, next.Key)
	}
	// The give-back of primitives, for the drawn holders.
	for _, r := range cut {
		if r.Unshared {
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: r.Key, Holder: r.Holder}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Extends with another TTL, cut in flight, may move the records onto etcd leases of their
	// own, unknown to their callers; the next Extends of that TTL take the Store's spares.
	for i := range tries {
		tctx, cancel := short()
		s.Extend(tctx, core.ExtendRequest{Key: fmt.Sprint("next", i), Holder: "h", TTL: 2 * time.Minute})
		cancel()
	}
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	on := map[int64][]string{}
	for _, kv := range resp.Kvs {
		if rest := strings.TrimPrefix(string(kv.Key), prefix); strings.Contains(rest, "/l/") {
			on[kv.Lease] = append(on[kv.Lease], rest)
		}
	}
	shared := 0
	for id, recs := range on {
		if len(recs) > 1 {
			shared++
			t.Logf("etcd lease %x carries %d grants: %v", id, len(recs), recs)
		}
	}
	if shared > 0 {
		t.Errorf("%d etcd leases carry more than one grant", shared)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, key := range granted {
		r, err := c.Get(ctx, prefix+key+"/l/h", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if r.Count != 1 {
			ended++
		}
	}
	if ended > 0 {
		t.Errorf("%d of the %d grants reported were ended by the Store's Close", ended, len(granted))
	}
}

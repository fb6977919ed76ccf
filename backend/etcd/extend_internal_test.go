package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestExtendOfAnUntakenGrantKeepsNoSpareAnotherGrantIsOn: a release grants two heads of the line
// on one etcd lease; the first head's Extend moves its grant onto leases of its own, while the
// second's is still on the shared lease. That lease is no spare of the extending Store's: were it
// one, the Store's next grant (x's, on another key) would go on it, and the Store that keeps it as a
// spare last (the second head's, which gives its grant back) would end x's lease when it closes,
// long before x's TTL, with x still holding.
func TestExtendOfAnUntakenGrantKeepsNoSpareAnotherGrantIsOn(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Shared(t)
	prefix := uniquePrefix(t)
	open := func() *Store {
		s, err := New(srv.Client(t), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	granter, first, second := open(), open(), open()
	raw := srv.Client(t)
	ctx := context.Background()
	req := func(key, holder string, permits int) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: permits, Limit: 2, TTL: time.Minute, Wait: time.Minute}
	}
	a := granted(t, granter, req("k", "a", 2))
	for _, w := range []struct {
		s      *Store
		holder string
	}{{first, "h1"}, {second, "h2"}} {
		if res, err := w.s.Acquire(ctx, req("k", w.holder, 1)); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want a refusal, waiting", w.holder, res, err)
		}
	}
	if ok, err := granter.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: a.Fence}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	shared := leaseOf(t, granter, raw, "k", "h1")
	if shared == 0 || leaseOf(t, granter, raw, "k", "h2") != shared {
		t.Fatalf("after the release: h1's grant on %x, h2's on %x; want both on one etcd lease", shared, leaseOf(t, granter, raw, "k", "h2"))
	}
	if _, err := first.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "h1", TTL: time.Minute}); err != nil {
		t.Fatalf("Extend(h1) of its untaken grant: %v", err)
	}
	// x's TTL is the shared lease's: a spare of that lease would carry x's grant.
	granted(t, first, core.AcquireRequest{Key: "k2", Holder: "x", Permits: 1, Limit: 1, TTL: time.Duration(seconds(first.sessionTTL)) * time.Second})
	onShared := leaseOf(t, first, raw, "k2", "x") == shared
	// h2 gives its grant back, and its Store closes.
	w, err := second.Register(ctx, req("k", "h2", 1))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	poll.Within(t, 10*time.Second, "h2's grant given back", func() ([]core.LeaseInfo, bool) {
		ls := leasesHeld(t, granter, "k")
		return ls, len(ls) == 1
	})
	<-second.bg.idle()
	second.Close()
	if ls := leasesHeld(t, first, "k2"); len(ls) != 1 || ls[0].Holder != "x" {
		t.Errorf("x's lease on k2 after another Store closed: %+v; want it held for its TTL (x's grant on h2's grant's etcd lease: %v)", ls, onShared)
	}
	if onShared {
		t.Errorf("x's grant went on the etcd lease h2's untaken grant was on (%x)", shared)
	}
}

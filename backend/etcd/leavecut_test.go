package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestWaiterWhoseLeaveIsCutOffStillLeaves: a waiter that gives up while etcd cannot be reached
// (its connection held past the leave's whole budget, within the place's Wait) leaves its place
// once etcd can be reached again; the line does not grant the key to the place it left behind,
// and the next one asking is served.
func TestWaiterWhoseLeaveIsCutOffStillLeaves(t *testing.T) {
	testenv.SkipShort(t, "cuts a connection")
	t.Parallel()
	srv := etcdtest.Start(t)
	px := srv.Proxy(t)
	key := uniqueKey(t)
	holder, other := storeOn(t, srv), storeOn(t, srv)
	// A session that outlasts the hold: the place stays unless the Store leaves it.
	cut, err := etcd.New(srv.Client(t, "http://"+px.Addr), etcd.WithSessionTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cut.Close() })
	ctx := context.Background()
	h := mustAcquire(t, holder, req(key, "h", 1, 1))
	wr := req(key, "w", 1, 1)
	w := mustWait(t, cut, wr)
	// The waiter gives up while its connection is held for longer than a leave's budget: the
	// leave is not answered within it.
	px.Hold(true)
	w.Close()
	time.AfterFunc(waitline.LeaveBudget+500*time.Millisecond, func() { px.Cut(); px.Hold(false) })
	if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	poll.Within(t, 20*time.Second, "the key granted to the next one asking, not to the place left behind", func() (core.AcquireResult, bool) {
		res, err := other.Acquire(ctx, req(key, "next", 1, 1))
		return res, err == nil && res.Granted
	})
}

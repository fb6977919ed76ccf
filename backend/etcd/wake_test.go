package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// grantedWhenWoken waits, as the primitives do, for w's wakes and tries r again at each one until
// it is granted; it fails t if that takes longer than within.
func grantedWhenWoken(t *testing.T, s core.Store, w core.Wake, r core.AcquireRequest, within time.Duration) {
	t.Helper()
	r.Wait = time.Minute
	deadline := time.After(within)
	for {
		select {
		case <-w.C():
		case <-deadline:
			t.Fatalf("the waiter %s was not granted within %v", r.Holder, within)
		}
		res, err := s.Acquire(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Granted {
			return
		}
	}
}

// A waiter whose Store starts its watch of the key from a refusal's revision that was compacted
// meanwhile (etcd cancels such a watch) is still woken by the release that serves it.
func TestWaiterWatchingFromACompactedRevisionIsWoken(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	a, w := storeOn(t, srv), storeOn(t, srv)
	ctx := context.Background()
	h := mustAcquire(t, a, req("k", "h", 1, 1))
	wr := req("k", "w", 1, 1)
	wr.Wait = time.Minute
	if res, err := w.Acquire(ctx, wr); err != nil || res.Granted {
		t.Fatalf("Acquire(w) = %+v, %v; want a refusal", res, err)
	}
	for range 5 { // the key moves on past the refusal's revision
		mustAcquire(t, a, req("k", "h", 1, 1))
	}
	resp, err := c.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	wt, err := w.Register(ctx, wr)
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Close()
	if ok, err := a.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	grantedWhenWoken(t, w, wt, wr, 20*time.Second)
}

// A waiter whose server is killed and restarted on its data is woken by a release after the
// restart.
func TestWaiterIsWokenAfterTheServerRestarts(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	a, w := storeOn(t, srv), storeOn(t, srv, etcd.WithSessionTTL(time.Minute))
	ctx := context.Background()
	hr := req("k", "h", 1, 1)
	hr.TTL = time.Minute
	h := mustAcquire(t, a, hr)
	wt := mustWait(t, w, req("k", "w", 1, 1))
	srv.Restart(t)
	var err error
	var ok bool
	for range 50 { // the client reconnects
		ok, err = a.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "h", Fence: h.Fence})
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || !ok {
		t.Fatalf("Release(h) after the restart = %v, %v", ok, err)
	}
	grantedWhenWoken(t, w, wt, req("k", "w", 1, 1), 30*time.Second)
}

package etcd

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// stallingLease stalls once, after the first lease it grants once armed, before handing it to
// the Store: past the lease's TTL, the lease ends before the Store uses it.
type stallingLease struct {
	clientv3.Lease
	armed   *atomic.Bool
	stalled chan struct{}
}

func (x stallingLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	g, err := x.Lease.Grant(ctx, ttl)
	if err == nil && x.armed.CompareAndSwap(true, false) {
		time.Sleep(time.Duration(ttl)*time.Second + 1500*time.Millisecond) // past the lease and etcd's next look
		close(x.stalled)
	}
	return g, err
}

// TestAcquireStalledPastItsTTLBeforeItsWriteIsStillGranted: a try that stalls between asking
// etcd for its lease and writing the grant, longer than the TTL, finds the lease ended; it asks
// again, on a new lease, rather than failing.
func TestAcquireStalledPastItsTTLBeforeItsWriteIsStillGranted(t *testing.T) {
	testenv.SkipShort(t, "stalls 2.5s")
	t.Parallel()
	srv := etcdtest.Shared(t)
	c := srv.Client(t)
	x := stallingLease{Lease: c.Lease, armed: new(atomic.Bool), stalled: make(chan struct{})}
	c.Lease = x
	st, err := New(c, WithPrefix(uniquePrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	x.armed.Store(true)
	res, err := st.Acquire(t.Context(), core.AcquireRequest{Key: "stalled", Holder: "h", Permits: 1, Limit: 1, TTL: time.Second})
	if err != nil || !res.Granted {
		t.Fatalf("Acquire after a stall past its lease's TTL = %+v, %v; want granted", res, err)
	}
	select {
	case <-x.stalled:
	default:
		t.Fatal("the Acquire granted no new etcd lease, so it never stalled")
	}
}

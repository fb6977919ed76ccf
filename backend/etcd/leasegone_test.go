package etcd

import (
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestAcquireStalledPastItsTTLBeforeItsWriteIsStillGranted: a try that stalls between asking
// etcd for its lease and writing the grant, longer than the TTL, finds the lease ended; it asks
// again, on a new lease, rather than failing.
func TestAcquireStalledPastItsTTLBeforeItsWriteIsStillGranted(t *testing.T) {
	testenv.SkipShort(t, "stalls 2.5s")
	// Not parallel: the hook is the package's.
	srv := etcdtest.Shared(t)
	st, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var once sync.Once
	afterGrantHook = func() { once.Do(func() { time.Sleep(2500 * time.Millisecond) }) } // past the 1s lease and etcd's next look
	defer func() { afterGrantHook = nil }()
	res, err := st.Acquire(t.Context(), core.AcquireRequest{Key: "stalled:" + t.Name(), Holder: "h", Permits: 1, Limit: 1, TTL: time.Second})
	if err != nil || !res.Granted {
		t.Fatalf("Acquire after a stall past its lease's TTL = %+v, %v; want granted", res, err)
	}
}

package etcd

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestGrantAfterSparesEtcdEndedIsStillMade: spares etcd has ended (a spare's age is counted from
// its return, not its last renewal, so one may be gone) cost a try a refused transaction at most:
// the try asks again, passing over the ended ones, and is granted.
func TestGrantAfterSparesEtcdEndedIsStillMade(t *testing.T) {
	t.Parallel()
	s, c := renewTestStore(t)
	ctx := t.Context()
	ttl := 5 * time.Second
	var dead []spare
	for range 4 {
		g, err := c.Grant(ctx, seconds(ttl))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Revoke(ctx, g.ID); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, spare{g.ID, seconds(ttl)})
	}
	s.spares.put(clientv3.LeaseID(0), dead)
	key := t.Name()
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: ttl})
	if err != nil || !res.Granted {
		t.Fatalf("Acquire with ended spares = %+v, %v; want granted", res, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
}

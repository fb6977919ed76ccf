package etcd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// A lease refreshed by two Stores at once (a holder id adopted by a second process), one of them
// with another TTL, which moves the lease onto new etcd leases, is never reported lost while it
// is held: a renewal that finds its etcd lease revoked looks again.
func TestExtendsFromTwoStoresLoseNothing(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	a, b := newStore(t), newStore(t)
	r := req(key, "h", 1, 1)
	r.TTL = 20 * time.Second
	mustAcquire(t, a, r)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i, s := range []core.Store{a, b} {
		wg.Go(func() {
			for j := range 40 {
				ttl := 20 * time.Second
				if i == 1 && j%2 == 0 {
					ttl = 30 * time.Second
				}
				if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: ttl}); err != nil {
					t.Errorf("Extend %d of Store %d (TTL %v) of a held lease: %v", j, i, ttl, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

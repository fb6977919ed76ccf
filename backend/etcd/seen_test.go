package etcd_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// A Store that watches a key decides from its watch's copy of the key's records, which may lag
// etcd. A request it refuses as a limit mismatch, or as invalid, must be refused on the records
// as they are: a release that returned before the request began is seen, so a request under
// another limit, or for other permits, right after it is granted.
func TestRequestAfterAReleaseIsNotRefusedOnTheWatchsOldCopy(t *testing.T) {
	t.Parallel()
	watcher, other, key := newStore(t), newStore(t), uniqueKey(t)
	ctx := t.Context()
	w, err := watcher.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	req := func(holder string, permits, limit int) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: permits, Limit: limit, TTL: time.Minute}
	}
	for i := range 30 {
		for _, s := range []core.Store{watcher, other} {
			// Held under limit 1, released, then asked for under limit 2.
			if res, err := s.Acquire(ctx, req("a", 1, 1)); err != nil || !res.Granted {
				t.Fatalf("round %d: Acquire(a, limit 1) = %+v, %v; want granted", i, res, err)
			}
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
				t.Fatalf("round %d: Release(a) = %v, %v", i, ok, err)
			}
			if res, err := watcher.Acquire(ctx, req("b", 1, 2)); err != nil || !res.Granted {
				t.Fatalf("round %d: Acquire(b, limit 2) right after a's release = %+v, %v; want granted", i, res, err)
			}
			if ok, err := watcher.Release(ctx, core.ReleaseRequest{Key: key, Holder: "b"}); err != nil || !ok {
				t.Fatalf("round %d: Release(b) = %v, %v", i, ok, err)
			}
			// Held with 1 permit of 2, released, then asked for with 2 by the same holder.
			if res, err := s.Acquire(ctx, req("c", 1, 2)); err != nil || !res.Granted {
				t.Fatalf("round %d: Acquire(c, 1 of 2) = %+v, %v; want granted", i, res, err)
			}
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "c"}); err != nil || !ok {
				t.Fatalf("round %d: Release(c) = %v, %v", i, ok, err)
			}
			if res, err := watcher.Acquire(ctx, req("c", 2, 2)); err != nil || !res.Granted {
				t.Fatalf("round %d: Acquire(c, 2 of 2) right after its release of 1 = %+v, %v; want granted", i, res, err)
			}
			if ok, err := watcher.Release(ctx, core.ReleaseRequest{Key: key, Holder: "c"}); err != nil || !ok {
				t.Fatalf("round %d: Release(c) = %v, %v", i, ok, err)
			}
		}
	}
}

package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestWatchOfALoneLeaseHearsItsReleaseAndTheNextGrant: a watch started on a key held by a lone
// lease (of a Store of the other driver) turns it into the hash, keeping the lease as it was;
// the release is heard, and so is the next grant, which is in the hash while the watch lives.
func TestWatchOfALoneLeaseHearsItsReleaseAndTheNextGrant(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	a, b := redisharness.Drivers["goredis"](t, srv.Addr), redisharness.Drivers["valkey"](t, srv.Addr)
	for i, pair := range [][2]redisharness.Store{{a, b}, {b, a}} {
		changer, watcher := pair[0], pair[1]
		key := "lonewatch:" + string(rune('0'+i))
		k := rediscore.Keys(key)[0]
		req := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Value: "v"}
		res := mustAcquire(t, changer, req, true)
		if typ := c.Type(ctx, k).Val(); typ != "string" {
			t.Fatalf("the lease key is a %s before the watch; want the lone lease", typ)
		}
		w := reliableWatch(t, watcher, key)
		if typ := c.Type(ctx, k).Val(); typ != "hash" {
			t.Fatalf("the lease key is a %s under a watch; want the hash", typ)
		}
		if snap, err := watcher.Inspect(ctx, key); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Fence != res.Fence || snap.Leases[0].Value != "v" {
			t.Fatalf("Inspect under the watch = %+v, %v; want h's lease at fence %d", snap, err, res.Fence)
		}
		if e, err := changer.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute}); err != nil || e.Fence != res.Fence {
			t.Fatalf("Extend under the watch = %+v, %v", e, err)
		}
		if ok, err := changer.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); !ok || err != nil {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		if !heard(w) {
			t.Fatal("the watch did not hear the release of the lease it found lone")
		}
		next := mustAcquire(t, changer, core.AcquireRequest{Key: key, Holder: "g", Permits: 1, Limit: 1, TTL: time.Minute}, true)
		if next.Fence <= res.Fence {
			t.Fatalf("the next grant's fence %d is not above %d", next.Fence, res.Fence)
		}
		if !heard(w) {
			t.Fatal("the watch did not hear the next grant")
		}
		if typ := c.Type(ctx, k).Val(); typ != "hash" {
			t.Fatalf("a grant on a watched key made a %s; want the hash", typ)
		}
		w.Close()
	}
}

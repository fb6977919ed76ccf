package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestLoneLeaseTiersAndConversionsRunUnderTheDocumentedACL: a user with exactly the documented
// ACL, by EVALSHA (no FCALL) and by FCALL, through both drivers: a lone lease is made, renewed,
// inspected, turned into the hash by a second holder's refused try or by a watch, or left a
// string, and released; the key leaves nothing (but the watch's record, while it lasts).
func TestLoneLeaseTiersAndConversionsRunUnderTheDocumentedACL(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	aclUsers(t, srv.Addr)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	for name, mk := range userStores(srv.Addr) {
		for _, user := range []string{"old", "new"} {
			t.Run(name+"/"+user, func(t *testing.T) {
				s := mk(t, user)
				for _, convert := range []string{"a refused try", "a watch", "none"} {
					key := "acl:" + name + ":" + user + ":" + convert
					k := rediscore.Keys(key)[0]
					req := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Value: "v"}
					r := mustAcquire(t, s, req, true)
					if typ := c.Type(ctx, k).Val(); typ != "string" {
						t.Fatalf("the lone lease is a %s", typ)
					}
					if e, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute}); err != nil || e.Fence != r.Fence || e.Value != "v" || e.Limit != 1 {
						t.Fatalf("Extend = %+v, %v", e, err)
					}
					if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Fence != r.Fence {
						t.Fatalf("Inspect = %+v, %v", snap, err)
					}
					switch convert {
					case "a refused try":
						mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "x", Permits: 1, Limit: 1, TTL: time.Minute}, false)
					case "a watch":
						w, err := s.Watch(ctx, key)
						if err != nil {
							t.Fatal(err)
						}
						defer w.Close()
					}
					if want := map[bool]string{true: "string", false: "hash"}[convert == "none"]; c.Type(ctx, k).Val() != want {
						t.Fatalf("after %s the lease key is a %s; want a %s", convert, c.Type(ctx, k).Val(), want)
					}
					if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: r.Fence}); !ok || err != nil {
						t.Fatalf("Release after %s = %v, %v", convert, ok, err)
					}
					if n := c.Exists(ctx, rediscore.Keys(key)...).Val(); convert != "a watch" && n != 0 {
						t.Fatalf("after %s and the release, %d of the key's Redis keys are left", convert, n)
					}
				}
			})
		}
	}
}

package rediscore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestLoneLeaseReleasesAndInspectsWhenOutOfMemory: with maxmemory full (noeviction), by FCALL
// and by EVALSHA (a user without functions), through both drivers: a lone lease is inspected,
// a second holder's TryAcquire is refused (by FCALL with OOM, leaving the string as it was; by
// EVALSHA as when memory is free), the lease is kept, and the holder's Release deletes the key.
func TestLoneLeaseReleasesAndInspectsWhenOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	aclUsers(t, srv.Addr)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	for name, mk := range userStores(srv.Addr) {
		for _, user := range []string{"old", "new"} {
			t.Run(name+"/"+user, func(t *testing.T) {
				do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0")
				s := mk(t, user)
				key := "leasehold:oomlone:" + name + ":" + user
				k := rediscore.Keys(key)[0]
				res := mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
				was := c.Get(ctx, k).Val()
				do(t, srv.Addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
				do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "1")
				t.Cleanup(func() { redistest.Do(srv.Addr, "CONFIG", "SET", "maxmemory", "0") })
				if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Fence != res.Fence {
					t.Fatalf("Inspect when out of memory: %+v, %v", snap, err)
				}
				r, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
				switch {
				case user == "new" && (err == nil || !strings.Contains(err.Error(), "OOM")):
					t.Fatalf("a second holder's try by FCALL when out of memory: %+v, %v; want OOM", r, err)
				case user == "new" && c.Get(ctx, k).Val() != was:
					t.Fatalf("the lone lease %q became %q", was, c.Get(ctx, k).Val())
				case user == "old" && (err != nil || r.Granted):
					// EVALSHA lets a script that has written (unlone's DEL) write on: the lease is
					// turned into the hash, and the try refused.
					t.Fatalf("a second holder's try by EVALSHA when out of memory: %+v, %v; want a refusal", r, err)
				}
				if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "a" || snap.Leases[0].Fence != res.Fence {
					t.Fatalf("Inspect after the try: %+v, %v; want a's lease as it was", snap, err)
				}
				if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: res.Fence}); !ok || err != nil {
					t.Fatalf("Release when out of memory: %v, %v", ok, err)
				}
				if n := c.Exists(ctx, rediscore.Keys(key)...).Val(); n != 0 {
					t.Fatalf("%d of the key's Redis keys left after the release", n)
				}
				do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0")
			})
		}
	}
}

// TestLoneLeaseWithAFenceAboveTheClockReleasesWhenOutOfMemory: with maxmemory full (noeviction),
// by FCALL and by EVALSHA, through both drivers, the release of a Redlock node's lone lease (its
// fence a second ahead of the clock) goes through, as the lease hash's does: the key keeps the
// fence alone, and the next grant, once memory is free, is above it.
func TestLoneLeaseWithAFenceAboveTheClockReleasesWhenOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	aclUsers(t, srv.Addr)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	do(t, srv.Addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	for name, mk := range userStores(srv.Addr) {
		for _, user := range []string{"old", "new"} {
			t.Run(name+"/"+user, func(t *testing.T) {
				do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0")
				s := mk(t, user).(core.FenceRaiser)
				key := "leasehold:oomfloor:" + name + ":" + user
				k := rediscore.Keys(key)[0]
				req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
				res, err := s.AcquireAbove(ctx, req, uint64(time.Now().Add(time.Second).UnixMicro()))
				if err != nil || !res.Granted || c.Type(ctx, k).Val() != "string" {
					t.Fatalf("AcquireAbove a second ahead: %+v, %v (the key a %s); want a lone lease", res, err, c.Type(ctx, k).Val())
				}
				do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "1")
				t.Cleanup(func() { redistest.Do(srv.Addr, "CONFIG", "SET", "maxmemory", "0") })
				if ok, err := s.(core.Store).Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: res.Fence}); !ok || err != nil {
					t.Fatalf("Release when out of memory: %v, %v", ok, err)
				}
				do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0")
				r, err := s.(core.Store).Acquire(ctx, core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
				if err != nil || !r.Granted || r.Fence <= res.Fence {
					t.Fatalf("the next grant: %+v, %v; want a fence above %d", r, err, res.Fence)
				}
			})
		}
	}
}

// TestNodeHashReleaseLeavesTheFenceAloneWhenOutOfMemory: with maxmemory full (noeviction), by
// FCALL and by EVALSHA as users with exactly the documented ACL, through both drivers: the
// release of a Redlock node's last lease held in the lease hash (a limit of 2), its fence above
// the clock, goes through, by the fast path and by the general path (settle; another holder's
// expired lease sends the release there), and leaves the key's last fence alone as a string,
// with an expiry; the next grant, once memory is free, is above it.
func TestNodeHashReleaseLeavesTheFenceAloneWhenOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	aclUsers(t, srv.Addr)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	do(t, srv.Addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	for name, mk := range userStores(srv.Addr) {
		for _, user := range []string{"old", "new"} {
			for _, path := range []string{"fast", "general"} {
				t.Run(name+"/"+user+"/"+path, func(t *testing.T) {
					do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0")
					s := mk(t, user)
					key := "leasehold:oomhash:" + name + ":" + user + ":" + path
					k := rediscore.Keys(key)[0]
					req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 2, TTL: time.Minute}
					res, err := s.(core.FenceRaiser).AcquireAbove(ctx, req, uint64(time.Now().Add(time.Second).UnixMicro()))
					if err != nil || !res.Granted || c.Type(ctx, k).Val() != "hash" {
						t.Fatalf("AcquireAbove a second ahead, limit 2: %+v, %v (the key a %s); want the hash", res, err, c.Type(ctx, k).Val())
					}
					last := res.Fence
					if path == "general" {
						b := mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 2, TTL: time.Millisecond}, true)
						last = b.Fence
						poll.Until(t, "b's lease to expire", func() bool {
							snap, err := s.Inspect(ctx, key)
							return err == nil && len(snap.Leases) == 1
						})
					}
					do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "1")
					t.Cleanup(func() { redistest.Do(srv.Addr, "CONFIG", "SET", "maxmemory", "0") })
					if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: res.Fence}); !ok || err != nil {
						t.Fatalf("Release when out of memory: %v, %v", ok, err)
					}
					do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "0")
					if got, want := c.Get(ctx, k).Val(), rediscore.LoneTag+strconv.FormatUint(last, 10); got != want {
						t.Fatalf("after the release the key holds %q (a %s); want the fence alone, %q", got, c.Type(ctx, k).Val(), want)
					}
					if pttl := c.PTTL(ctx, k).Val(); pttl <= 0 || pttl > 2*time.Second {
						t.Fatalf("the fence alone lasts %v; want until the clock passes it", pttl)
					}
					r, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "c", Permits: 1, Limit: 1, TTL: time.Minute})
					if err != nil || !r.Granted || r.Fence <= last {
						t.Fatalf("the next grant: %+v, %v; want a fence above %d", r, err, last)
					}
				})
			}
		}
	}
}

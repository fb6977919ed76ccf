package rediscore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestMalformedLoneStringIsRefusedAndKept: a string under the lone lease's tag that does not read
// as one (truncated, a holder length past its end) is someone else's: every call fails with
// WRONGTYPE and leaves it, and its expiry or lack of one, as it was.
func TestMalformedLoneStringIsRefusedAndKept(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, srv.Addr)
			key := "malformed:" + name
			k := rediscore.Keys(key)[0]
			for _, v := range []string{rediscore.LoneTag + "12 5 h", rediscore.LoneTag + "12 1", rediscore.LoneTag, rediscore.LoneTag + "x 1 h"} {
				for _, ttl := range []time.Duration{0, time.Hour} {
					if err := c.Set(ctx, k, v, ttl).Err(); err != nil {
						t.Fatal(err)
					}
					_, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute})
					wrongType(t, "Extend", v, err)
					_, err = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"})
					wrongType(t, "Release", v, err)
					_, err = s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
					wrongType(t, "Acquire", v, err)
					_, err = s.Inspect(ctx, key)
					wrongType(t, "Inspect", v, err)
					if got, left := c.Get(ctx, k).Val(), c.PTTL(ctx, k).Val(); got != v || (ttl == 0) != (left < 0) {
						t.Fatalf("the string %q (expiry %v) became %q, expiring in %v; want it untouched", v, ttl, got, left)
					}
				}
			}
		})
	}
}

// TestLoneLeaseWithoutExpiryIsOnlyItsHoldersToEnd: a lone lease whose key lost its expiry
// (PERSIST, or a copy that dropped TTLs) is still its holder's: its Extend gives the key the TTL
// again and its Release ends it. Anyone else's Acquire and Inspect fail with WRONGTYPE (the
// lease has no end to report or wait for), their Extend and Release find nothing of theirs, and
// none of them touches the string.
func TestLoneLeaseWithoutExpiryIsOnlyItsHoldersToEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, srv.Addr)
			key := "persisted:" + name
			k := rediscore.Keys(key)[0]
			for _, v := range []string{rediscore.LoneTag + "12 1 hv", rediscore.LoneTag + "12 1 h"} {
				if err := c.Set(ctx, k, v, 0).Err(); err != nil {
					t.Fatal(err)
				}
				_, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "other", Permits: 1, Limit: 1, TTL: time.Minute})
				wrongType(t, "Acquire by another", v, err)
				_, err = s.Inspect(ctx, key)
				wrongType(t, "Inspect", v, err)
				if r, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "other", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
					t.Fatalf("Extend by another: %+v, %v; want ErrLost", r, err)
				}
				if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "other"}); err != nil || ok {
					t.Fatalf("Release by another: %v, %v; want nothing released", ok, err)
				}
				if got, left := c.Get(ctx, k).Val(), c.PTTL(ctx, k).Val(); got != v || left >= 0 {
					t.Fatalf("the string %q became %q, expiring in %v; want it untouched", v, got, left)
				}
				r, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute})
				if err != nil || r.Fence != 12 {
					t.Fatalf("Extend by its holder: %+v, %v; want it held at fence 12", r, err)
				}
				if left := c.PTTL(ctx, k).Val(); left <= 0 || left > time.Minute {
					t.Fatalf("after its holder's Extend the key expires in %v; want within the minute", left)
				}
				if err := c.Persist(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
				if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: 12}); err != nil || !ok {
					t.Fatalf("Release by its holder: %v, %v; want it released", ok, err)
				}
				if n := c.Exists(ctx, k).Val(); n != 0 {
					t.Fatalf("the released lease's key is still there: %q", c.Get(ctx, k).Val())
				}
			}
		})
	}
}

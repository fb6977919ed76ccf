package rediscore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestLoneTiersDoWhatTheGeneralPathsDo: on one server at a clock the test moves, two keys run the
// same history of calls, one with the scripts as they are (a lone lease kept as a string, its
// tiers tried first) and one with only the general paths (every lease in the hash); after every
// call the replies, and what Inspect reports of the two keys, are the same. The histories mix
// calls a lone lease serves (one permit of a limit of 1, no lock delay) with calls it cannot
// (waits, lock delays, fence floors above the clock, a semaphore's limit, leaves, watches), so
// that lone leases are made, renewed, ended, let expire and turned into hashes. Floors include a
// Redlock node's (a second ahead) and the highest a lone lease of the TTL takes (the clock passes
// it LONE_SLACK ms before the lease ends) and a µs above, so that fences alone are left by
// releases and taken by grants; and the clock steps back now and then, by µs or ms, never to a
// fence it has passed (the premise of the key's fences: see common.lua) nor before an expiry it
// has passed (a key that expired is gone in Redis, an expired entry in the hash is not).
func TestLoneTiersDoWhatTheGeneralPathsDo(t *testing.T) {
	t.Parallel()
	c := raw(t, redistest.StartServer(t).Addr)
	ctx := context.Background()
	general := map[int]string{srcAcquire: generalSource(t, srcAcquire), srcExtend: generalSource(t, srcExtend), srcRelease: generalSource(t, srcRelease)}
	lone, gen := rediscore.Keys("lone"), rediscore.Keys("general")
	rapid.Check(t, func(rt *rapid.T) {
		if err := c.FlushAll(ctx).Err(); err != nil {
			rt.Fatal(err)
		}
		now := time.Now()
		fences := map[string]int64{}
		// high is the latest the clock has been; passed, the least it may step back to: above
		// every fence granted below high, at or after every expiry set at or before high.
		high, passed := now, now
		var granted []int64  // µs
		var expiries []int64 // ms
		for i := range rapid.IntRange(1, 12).Draw(rt, "calls") {
			src, args := drawLoneCall(rt, now, fences)
			run := func(keys []string, code string) string {
				r, err := evalAt(ctx, c, now, code, keys, args...).Result()
				if err == redis.Nil {
					err = nil
				}
				return fmt.Sprint(r, " ", err)
			}
			gsrc, ok := general[src]
			if !ok {
				gsrc = rediscore.Sources[src]
			}
			got, want := run(lone, rediscore.Sources[src]), run(gen, gsrc)
			if got != want {
				rt.Fatalf("call %d (script %d %v): lone tiers replied %s, the general path %s", i, src, args, got, want)
			}
			if src == srcAcquire && !strings.HasPrefix(got, "[") {
				var f int64 // a granted fence: a later floor may be just above it
				fmt.Sscan(got, &f)
				fences[args[0].(string)] = f
				granted = append(granted, f)
			}
			if src == srcAcquire || src == srcExtend {
				expiries = append(expiries, now.UnixMilli()+args[1].(int64))
			}
			ins := func(keys []string) string {
				r, err := evalAt(ctx, c, now, rediscore.Sources[srcInspect], keys).Result()
				if out, ok := r.([]any); ok && len(out) == 3 {
					// Nothing held, delayed or waiting: the limit is a counter left from leases
					// gone, which the general path keeps with the hash and a lone lease with
					// nothing.
					out[0] = "-"
				}
				return fmt.Sprint(r, " ", err)
			}
			if got, want := ins(lone), ins(gen); got != want {
				rt.Fatalf("after call %d (script %d %v): Inspect of the lone key %s, of the general one %s", i, src, args, got, want)
			}
			// The server's clock moves on between two calls, if only by a µs (a lone lease's
			// release deletes its fence, which the next grant's clock reading is above), or
			// steps back, but not past what it passed.
			step := rapid.SampledFrom([]time.Duration{time.Microsecond, time.Millisecond, 3 * time.Millisecond, time.Second,
				70 * time.Second, -time.Microsecond, -time.Millisecond, -3 * time.Millisecond}).Draw(rt, "later")
			now = now.Add(step)
			if now.After(high) {
				high = now
			}
			for _, f := range granted {
				if f < high.UnixMicro() && time.UnixMicro(f+1).After(passed) {
					passed = time.UnixMicro(f + 1)
				}
			}
			for _, e := range expiries {
				if e <= high.UnixMilli() && time.UnixMilli(e).After(passed) {
					passed = time.UnixMilli(e)
				}
			}
			if now.Before(passed) {
				now = passed
			}
		}
	})
}

// drawLoneCall draws one script call of TestLoneTiersDoWhatTheGeneralPathsDo on a key of limit 1
// (or, now and then, 2) among holders a and b: its script and ARGV.
func drawLoneCall(rt *rapid.T, now time.Time, fences map[string]int64) (int, []any) {
	holder := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "holder")
	ttl := rapid.SampledFrom([]int64{1, 2, 1002, 60000}).Draw(rt, "ttl")
	switch rapid.IntRange(0, 9).Draw(rt, "call") {
	case 0, 1, 2, 3:
		floor := int64(0)
		switch rapid.IntRange(0, 6).Draw(rt, "floor") {
		case 1:
			floor = now.UnixMicro() - 5000 // below the clock
		case 2:
			floor = now.UnixMicro() + 3000 // above it
		case 3:
			floor = fences[holder] + 1
		case 4:
			floor = now.UnixMicro() + 1000000 // a Redlock node's, a second ahead
		case 5, 6:
			// The highest floor a lone lease of ttl takes (the clock passes it two ms before
			// the lease ends), and a µs above it, which a lone lease cannot take.
			floor = (now.UnixMilli()+ttl-2)*1000 + 999 + int64(rapid.IntRange(0, 1).Draw(rt, "above"))
		}
		limit := rapid.SampledFrom([]int{1, 1, 1, 2}).Draw(rt, "limit")
		full := []any{holder, ttl, rapid.SampledFrom([]int64{0, 0, 60000}).Draw(rt, "wait"),
			rapid.SampledFrom([]string{"", "s:1"}).Draw(rt, "try"), "0", 1, limit,
			rapid.SampledFrom([]string{"", "v", "a value\nof two lines"}).Draw(rt, "value"), floor, int64(0),
			rapid.SampledFrom([]int64{0, 0, 0, 3}).Draw(rt, "lock delay")}
		return srcAcquire, trimmedAcquireArgv(full)
	case 4, 5:
		return srcExtend, []any{holder, ttl}
	case 6, 7:
		fence := "0"
		if rapid.Bool().Draw(rt, "fence") {
			fence = fmt.Sprint(fences[holder])
		}
		return srcRelease, []any{holder, fence}
	case 8:
		return srcLeave, []any{holder, 0}
	default:
		return srcWatch, []any{rapid.SampledFrom([]int64{2, 30000}).Draw(rt, "life")}
	}
}

// TestLoneLeaseIsOneStringThatExpiresWithIt: through a Store, an uncontended Mutex's lease is
// one string key, whose expiry is the lease's TTL and which its release deletes; a second
// holder's try, refused, turns it into the lease hash, which the release then deletes.
func TestLoneLeaseIsOneStringThatExpiresWithIt(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			ks := rediscore.Keys("lone")
			req := core.AcquireRequest{Key: "lone", Holder: "h", Permits: 1, Limit: 1, TTL: 30 * time.Second, Value: "v"}
			got := mustAcquire(t, s, req, true)
			if typ := c.Type(ctx, ks[0]).Val(); typ != "string" {
				t.Fatalf("the lease key is a %s; want a string", typ)
			}
			if ttl := c.PTTL(ctx, ks[0]).Val(); ttl <= 29*time.Second || ttl > 30*time.Second {
				t.Fatalf("the lease key expires in %v; want the TTL, 30s", ttl)
			}
			if n := c.Exists(ctx, ks[1:]...).Val(); n != 0 {
				t.Fatalf("%d of the line's keys exist", n)
			}
			if _, err := s.Extend(ctx, core.ExtendRequest{Key: "lone", Holder: "h", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if ttl := c.PTTL(ctx, ks[0]).Val(); ttl <= 59*time.Second {
				t.Fatalf("after an Extend of a minute the lease key expires in %v", ttl)
			}
			mustAcquire(t, s, core.AcquireRequest{Key: "lone", Holder: "x", Permits: 1, Limit: 1, TTL: time.Minute}, false)
			if typ := c.Type(ctx, ks[0]).Val(); typ != "hash" {
				t.Fatalf("after a refused try the lease key is a %s; want the hash", typ)
			}
			snap, err := s.Inspect(ctx, "lone")
			if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "h" || snap.Leases[0].Fence != got.Fence ||
				snap.Leases[0].Value != "v" || snap.Leases[0].TTL <= 59*time.Second {
				t.Fatalf("Inspect = %+v, %v; want h's lease, fence %d, value v, a minute left", snap, err, got.Fence)
			}
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "lone", Holder: "h", Fence: got.Fence}); !ok || err != nil {
				t.Fatalf("Release = %v, %v", ok, err)
			}
			if n := c.Exists(ctx, ks...).Val(); n != 0 {
				t.Fatalf("%d of the key's Redis keys are left after the release", n)
			}
		})
	}
}

// TestLoneLeaseOfSomeoneElsesStringIsRefused: a string at the lease key that is not a lone lease
// of ours fails every call with WRONGTYPE and is left as it was.
func TestLoneLeaseOfSomeoneElsesStringIsRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, srv.Addr)
			key := "theirs:" + name
			k := rediscore.Keys(key)[0]
			for _, v := range []string{"theirs", rediscore.LoneTag + "12 99 h", rediscore.LoneTag + "x 1 h"} {
				if err := c.Set(ctx, k, v, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				_, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
				wrongType(t, "Acquire", v, err)
				_, err = s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute})
				wrongType(t, "Extend", v, err)
				_, err = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"})
				wrongType(t, "Release", v, err)
				_, err = s.Inspect(ctx, key)
				wrongType(t, "Inspect", v, err)
				if got := c.Get(ctx, k).Val(); got != v {
					t.Fatalf("the string became %q; want %q untouched", got, v)
				}
			}
		})
	}
}

// wrongType fails t unless err is the WRONGTYPE error of a call on someone else's string v.
func wrongType(t *testing.T, op, v string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), "string") {
		t.Fatalf("%s on the string %q: %v; want a WRONGTYPE error naming a string", op, v, err)
	}
}

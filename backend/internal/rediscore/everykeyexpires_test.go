package rediscore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
)

// TestEveryKeyTheScriptsWriteExpiresOrIsDeleted: on a real server, at a clock the test moves, any
// sequence of the scripts' calls as the Stores send them (the fast paths' and the general
// paths': acquires of a lock or a semaphore with waits, try ids, values, fence floors, lock
// delays and overtaken leaves; extends, releases, leaves and watches; leases of a few ms that
// expire between calls) leaves every key of ours with an expiry, and every lease hash with its
// keep entry, or a lone lease's string (the one that carries the layout's version, and is its expiry).
func TestEveryKeyTheScriptsWriteExpiresOrIsDeleted(t *testing.T) {
	t.Parallel()
	c := raw(t, redistest.StartServer(t).Addr)
	ctx := context.Background()
	keys := rediscore.Keys("k")
	rapid.Check(t, func(rt *rapid.T) {
		if err := c.FlushAll(ctx).Err(); err != nil {
			rt.Fatal(err)
		}
		limit := rapid.IntRange(1, 2).Draw(rt, "limit")
		now := time.Now()
		for i := range rapid.IntRange(1, 12).Draw(rt, "calls") {
			holder := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "holder")
			ttl := rapid.SampledFrom([]int64{2, 60000}).Draw(rt, "ttl")
			var src int
			var args []any
			switch rapid.IntRange(0, 4).Draw(rt, "call") {
			case 0, 1:
				floor := int64(0)
				if rapid.Bool().Draw(rt, "floor") {
					floor = now.UnixMicro() + 3000
				}
				full := []any{holder, ttl, rapid.SampledFrom([]int64{0, 60000}).Draw(rt, "wait"),
					rapid.SampledFrom([]string{"", "s:1", "s:2"}).Draw(rt, "try"), "0",
					rapid.IntRange(1, limit).Draw(rt, "permits"), limit,
					rapid.SampledFrom([]string{"", "v"}).Draw(rt, "value"), int64(0), floor,
					rapid.SampledFrom([]int64{0, 3, 60000}).Draw(rt, "lock delay")}
				args = trimmedAcquireArgv(full)
				if len(args) > 10 && args[10] == int64(0) {
					args = args[:10]
				}
				if rapid.Bool().Draw(rt, "overtakes") {
					args = append(full, "s:9", int64(60000))
				}
				src = srcAcquire
			case 2:
				src, args = srcExtend, []any{holder, ttl}
			case 3:
				src, args = srcRelease, []any{holder}
			default:
				if rapid.Bool().Draw(rt, "watch") {
					src, args = srcWatch, []any{rapid.SampledFrom([]int64{2, 30000}).Draw(rt, "life")}
				} else {
					src, args = srcLeave, []any{holder, 0, rapid.SampledFrom([]string{"", "s:1"}).Draw(rt, "left try"), int64(60000)}
				}
			}
			if err := evalAt(ctx, c, now, rediscore.Sources[src], keys, args...).Err(); err != nil && err != redis.Nil {
				rt.Fatalf("call %d, script %d %v: %v", i, src, args, err)
			}
			for j, k := range keys {
				pttl, err := c.Do(ctx, "PTTL", k).Int64()
				if err != nil {
					rt.Fatal(err)
				}
				if pttl == -1 {
					rt.Fatalf("after call %d (script %d %v), %s has no expiry", i, src, args, k)
				}
				if j == 0 && pttl > 0 && c.Type(ctx, k).Val() == "string" {
					if v := c.Get(ctx, k).Val(); !strings.HasPrefix(v, rediscore.LoneTag) {
						rt.Fatalf("after call %d (script %d %v), the lease key holds %q, not a lone lease", i, src, args, v)
					}
				} else if j == 0 && pttl > 0 {
					if has, err := c.HExists(ctx, k, rediscore.KeepField).Result(); err != nil || !has {
						rt.Fatalf("after call %d (script %d %v), the lease hash has no %s (%v)", i, src, args, rediscore.KeepField, err)
					}
				}
			}
			now = now.Add(rapid.SampledFrom([]time.Duration{0, 3 * time.Millisecond, 70 * time.Second}).Draw(rt, "later"))
		}
	})
}

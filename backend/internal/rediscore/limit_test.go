package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// Tests of a key's one limit on Redis: a request of another limit than the key's leases', or
// than its waiters' when it has no lease, is refused with a *core.LimitMismatchError and writes
// nothing, whichever driver holds and whichever asks.

// mismatched asks st for req and fails t unless it is refused with a *core.LimitMismatchError
// naming held and req.Limit, the driver's error itself.
func mismatched(t *testing.T, st core.Store, req core.AcquireRequest, held int) {
	t.Helper()
	res, err := st.Acquire(context.Background(), req)
	var lm *core.LimitMismatchError
	if !errors.As(err, &lm) || !errors.Is(err, core.ErrLimitMismatch) {
		t.Fatalf("Acquire(%s, limit %d) = %+v, %v; want a *core.LimitMismatchError", req.Holder, req.Limit, res, err)
	}
	if lm.Held != held || lm.Requested != req.Limit {
		t.Errorf("Acquire(%s, limit %d): %v; want it to name limits %d and %d", req.Holder, req.Limit, err, held, req.Limit)
	}
	if _, ok := err.(*core.LimitMismatchError); !ok {
		t.Errorf("Acquire(%s, limit %d): %T; want the *core.LimitMismatchError unwrapped", req.Holder, req.Limit, err)
	}
}

// TestLimitMismatchWithWaitersOnlyInLine: a key whose only lease expired unreleased, with a
// waiter of limit 1 in its line, has that waiter's limit: a request of limit 2, through either
// driver, is refused naming 1, and Inspect reports 1.
func TestLimitMismatchWithWaitersOnlyInLine(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		a, b := mk(), mk()
		req := func(holder string, limit int, ttl, wait time.Duration) core.AcquireRequest {
			return core.AcquireRequest{Key: "line", Holder: holder, Permits: 1, Limit: limit, TTL: ttl, Wait: wait}
		}
		mustAcquire(t, a, req("gone", 1, 100*time.Millisecond, 0), true)
		mustAcquire(t, a, req("w", 1, time.Minute, time.Minute), false)
		expired(t, a, "line", "gone")
		for _, st := range []core.Store{a, b} {
			mismatched(t, st, req("c", 2, time.Minute, 0), 1)
			mismatched(t, st, req("c", 2, time.Minute, time.Minute), 1)
		}
		snap, err := b.Inspect(context.Background(), "line")
		if err != nil || snap.Limit != 1 || len(snap.Leases) != 0 || len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "w" {
			t.Errorf("Inspect = %+v, %v; want limit 1, no lease, w alone in line", snap, err)
		}
	})
}

// TestLimitMismatchAcrossDrivers: a go-redis holder of limit 2 and a valkey-go requester of
// limit 3 (and the other way round): refused, naming both limits; the same limit is granted.
func TestLimitMismatchAcrossDrivers(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, pair := range [][2]string{{"goredis", "valkey"}, {"valkey", "goredis"}} {
		t.Run(pair[0]+"/"+pair[1], func(t *testing.T) {
			holder, asker := redisharness.Drivers[pair[0]](t, srv.Addr), redisharness.Drivers[pair[1]](t, srv.Addr)
			key := "across:" + pair[0]
			req := func(h string, limit int) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: h, Permits: 1, Limit: limit, TTL: time.Minute}
			}
			mustAcquire(t, holder, req("a", 2), true)
			mismatched(t, asker, req("b", 3), 2)
			mismatched(t, asker, req("b", 1), 2)
			mustAcquire(t, asker, req("b", 2), true)
		})
	}
}

// TestRefusedMismatchWritesNothing: requests of another limit (acquires that would wait or not,
// with a value, a fence raised through core.FenceRaiser, the holder itself asking again, on a
// key held and on one with waiters only) leave every key of the key byte for byte as it was,
// with its expiry, and run no write and no PUBLISH on the server (its command counts); nor does
// a leave follow them.
func TestRefusedMismatchWritesNothing(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			req := func(key, holder string, limit int, ttl, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: limit, TTL: ttl, Wait: wait}
			}
			mustAcquire(t, s, req("held", "a", 2, time.Minute, 0), true)
			mustAcquire(t, s, req("held", "b", 2, time.Minute, 0), true)
			mustAcquire(t, s, req("held", "w", 2, time.Minute, time.Minute), false)
			mustAcquire(t, s, req("waited", "gone", 1, 100*time.Millisecond, 0), true)
			mustAcquire(t, s, req("waited", "w", 1, time.Minute, time.Minute), false)
			expired(t, s, "waited", "gone")
			raiser := s.(core.FenceRaiser)
			for _, key := range []string{"held", "waited"} {
				before, writes := dumpKey(t, c, key), writeCommands(t, srv.Addr)
				for _, r := range []core.AcquireRequest{
					req(key, "c", 3, time.Minute, 0),
					req(key, "c", 3, time.Minute, time.Hour),
					{Key: key, Holder: "c", Permits: 1, Limit: 5, TTL: time.Minute, Wait: time.Hour, Value: "v"},
					req(key, "a", 3, time.Minute, 0),
					req(key, "w", 3, time.Minute, time.Minute),
				} {
					if _, err := s.Acquire(ctx, r); !errors.Is(err, core.ErrLimitMismatch) {
						t.Fatalf("Acquire(%s on %s, limit %d): %v; want ErrLimitMismatch", r.Holder, key, r.Limit, err)
					}
					if _, err := raiser.RaiseFence(ctx, r, 1<<50); !errors.Is(err, core.ErrLimitMismatch) {
						t.Fatalf("RaiseFence(%s on %s, limit %d): %v; want ErrLimitMismatch", r.Holder, key, r.Limit, err)
					}
					if _, err := raiser.AcquireAbove(ctx, r, 1<<50); !errors.Is(err, core.ErrLimitMismatch) {
						t.Fatalf("AcquireAbove(%s on %s, limit %d): %v; want ErrLimitMismatch", r.Holder, key, r.Limit, err)
					}
				}
				// Inspect waits for the key's leaves this Store is still sending: none must be.
				if _, err := s.Inspect(ctx, key); err != nil {
					t.Fatal(err)
				}
				if after := dumpKey(t, c, key); after != before {
					t.Errorf("%s: refused requests changed its keys:\nbefore\n%s\nafter\n%s", key, before, after)
				}
				if after := writeCommands(t, srv.Addr); after != writes {
					t.Errorf("%s: refused requests ran writes: before %v, after %v", key, writes, after)
				}
			}
		})
	}
}

// dumpKey returns each Redis key of key: its name, absolute expiry and serialized value (DUMP).
func dumpKey(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, k := range rediscore.Keys(key) {
		at, err := c.Do(ctx, "PEXPIRETIME", k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Dump(ctx, k).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s expires %d: %q\n", k, at, v)
	}
	return b.String()
}

// writeCommands returns how many times the server ran each command that writes or publishes, in
// scripts or not (INFO commandstats).
func writeCommands(t *testing.T, addr string) string {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"hset", "hdel", "del", "zadd", "zrem", "zremrangebyscore", "pexpire", "publish"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				n, _, _ := strings.Cut(rest, ",")
				if _, err := strconv.Atoi(n); err != nil {
					t.Fatalf("INFO commandstats: %q", line)
				}
				fmt.Fprintf(&b, "%s=%s ", cmd, n)
			}
		}
	}
	return b.String()
}

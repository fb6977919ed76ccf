package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Tests of a key's one limit on Redis: a request of another limit than the key's leases', or
// than its waiters' when it has no lease, is refused with a *core.LimitMismatchError and writes
// nothing, whichever driver holds and whichever asks; a semaphore never holds more; and the
// bounds (the longest TTL, the largest limit, a fence floor past Lua's exact range) hold.

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
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		a, b := mk(), mk()
		req := func(holder string, limit int, ttl, wait time.Duration) core.AcquireRequest {
			return core.AcquireRequest{Key: "line", Holder: holder, Permits: 1, Limit: limit, TTL: ttl, Wait: wait}
		}
		mustAcquire(t, a, req("gone", 1, 2*time.Second, 0), true)
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
	t.Parallel()
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
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			req := func(key, holder string, limit int, ttl, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: limit, TTL: ttl, Wait: wait}
			}
			mustAcquire(t, s, req("held", "a", 2, time.Minute, 0), true)
			mustAcquire(t, s, req("held", "b", 2, time.Minute, 0), true)
			mustAcquire(t, s, req("held", "w", 2, time.Minute, time.Minute), false)
			mustAcquire(t, s, req("waited", "gone", 1, 2*time.Second, 0), true)
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

// TestSemaphoreNeverOverItsLimitUnderChurn: Stores of both drivers take and give back permits
// of one semaphore, waiting, trying and expiring, and never hold more than its limit at once.
func TestSemaphoreNeverOverItsLimitUnderChurn(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	const limit, workers, rounds = 3, 8, 25
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		s := redisharness.Drivers[[]string{"goredis", "valkey"}[i%2]](t, srv.Addr)
		sem, err := primitives.NewSemaphore(s, "churn", limit, primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 16))
			for range rounds {
				n := 1 + r.IntN(2)
				var l core.Lease
				var err error
				if r.IntN(3) == 0 {
					l, err = sem.TryAcquire(context.Background(), n)
					if errors.Is(err, core.ErrNotAcquired) {
						continue
					}
				} else {
					l, err = sem.Acquire(context.Background(), n)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if now := held.Add(int64(n)); now > limit {
					t.Errorf("%d permits held at once, over the limit %d", now, limit)
				} else {
					for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
					}
				}
				held.Add(-int64(n))
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := lineLen(t, srv.Addr, "churn"); n != 0 {
		t.Errorf("%d places left in the line", n)
	}
	t.Logf("peak %d of %d permits", peak.Load(), limit)
}

// TestLongestTTLAndLargestLimitOnRedis: a lease of core.MaxDuration stays held (no overflow
// into a negative expiry that would drop the keys), and a line on a key of limit core.MaxLimit
// keeps its waiters' requests readable: a release grants the head.
func TestLongestTTLAndLargestLimitOnRedis(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			long, err := primitives.NewMutex(s, "forever", primitives.WithTTL(core.MaxDuration))
			if err != nil {
				t.Fatal(err)
			}
			l, err := long.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := long.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
				t.Fatalf("a second TryAcquire beside a lease of MaxDuration: %v, want ErrNotAcquired", err)
			}
			if snap, _ := long.Inspect(ctx); len(snap.Leases) != 1 || snap.Leases[0].TTL < core.MaxDuration-time.Hour {
				t.Fatalf("the store holds %+v, want one lease with about MaxDuration left", snap.Leases)
			}
			if _, err := l.Extend(ctx, core.MaxDuration); err != nil {
				t.Fatalf("Extend by MaxDuration: %v", err)
			}
			if _, err := l.Extend(ctx, core.MaxDuration+1); !errors.Is(err, core.ErrInvalid) {
				t.Fatalf("Extend beyond MaxDuration: %v, want ErrInvalid", err)
			}
			l.Release(ctx)

			req := func(holder string, n int) core.AcquireRequest {
				return core.AcquireRequest{Key: "huge", Holder: holder, Permits: n, Limit: core.MaxLimit, TTL: core.MaxDuration, Wait: core.MaxDuration}
			}
			mustAcquire(t, s, req("a", core.MaxLimit), true)
			mustAcquire(t, s, req("b", core.MaxLimit-1), false)
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "huge", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			if snap, _ := s.Inspect(ctx, "huge"); len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" || snap.Leases[0].Permits != core.MaxLimit-1 {
				t.Fatalf("after the release, leases %+v, want b's grant from the line of %d permits", snap.Leases, core.MaxLimit-1)
			}
		})
	}
}

// TestAttemptsAreSpacedByRetryIntervalOnRedis: WithAttempts(3) while another holds for a
// minute gives up after about two retry intervals, having tried the store 3 times, although the
// waiter's notifications are reliable.
func TestAttemptsAreSpacedByRetryIntervalOnRedis(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			ctx := context.Background()
			holder, _ := primitives.NewMutex(mk(t, srv.Addr), "attempts", primitives.WithTTL(time.Minute))
			l, err := holder.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			s := &tries{Store: mk(t, srv.Addr)}
			m, _ := primitives.NewMutex(s, "attempts", primitives.WithTTL(time.Minute), primitives.WithAttempts(3),
				primitives.WithRetryInterval(20*time.Millisecond), primitives.WithAcquireTimeout(time.Minute))
			start := time.Now()
			if _, err := m.Acquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
				t.Fatalf("Acquire with 3 attempts beside a holder: %v, want ErrNotAcquired", err)
			}
			took := time.Since(start)
			t.Logf("3 attempts, retry interval 20ms: gave up after %v", took)
			if took < 40*time.Millisecond || took > 10*time.Second {
				t.Errorf("3 attempts took %v, want 2 retry intervals (40ms) or a little more, not less nor the holder's TTL", took)
			}
			if n := s.n.Load(); n != 3 {
				t.Errorf("3 attempts made %d tries", n)
			}
		})
	}
}

// tries is a Store that counts the Acquire calls it passes on; it keeps the Notifier.
type tries struct {
	redisharness.Store
	n atomic.Int64
}

func (s *tries) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	s.n.Add(1)
	return s.Store.Acquire(ctx, req)
}

// TestFenceFloorBeyondExactRangeOnRedis: a fence floor the scripts cannot count exactly (Lua
// numbers are doubles: above 2^53 a floor rounds down, and last + 1 rounds back to last) is
// refused with core.ErrInvalid and changes nothing, rather than granted below the floor and
// then granted again at the same fence to another holder.
func TestFenceFloorBeyondExactRangeOnRedis(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			fr := s.(core.FenceRaiser)
			ctx := context.Background()
			req := func(key, holder string) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 2, TTL: time.Minute}
			}
			for _, floor := range []uint64{1<<53 + 1, 1<<63 + 1, ^uint64(0)} {
				for op, call := range map[string]func(core.AcquireRequest, uint64) (core.AcquireResult, error){
					"AcquireAbove": func(r core.AcquireRequest, f uint64) (core.AcquireResult, error) { return fr.AcquireAbove(ctx, r, f) },
					"RaiseFence":   func(r core.AcquireRequest, f uint64) (core.AcquireResult, error) { return fr.RaiseFence(ctx, r, f) },
				} {
					key := "floor-" + op + "-" + time.Now().Format("150405.000000000")
					res, err := call(req(key, "a"), floor)
					switch {
					case err == nil && res.Granted && res.Fence >= floor:
						// Honoured exactly: then the next grant must be above it.
						if next := mustAcquire(t, s, req(key, "b"), true); next.Fence <= res.Fence {
							t.Errorf("%s(floor %d) granted fence %d, and the next grant fence %d: not above it", op, floor, res.Fence, next.Fence)
						}
					case errors.Is(err, core.ErrInvalid):
						if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 0 {
							t.Errorf("%s(floor %d) refused as invalid, but the key holds %+v, %v", op, floor, snap.Leases, err)
						}
					default:
						t.Errorf("%s(floor %d): %+v, %v; want a fence of at least the floor, or ErrInvalid", op, floor, res, err)
					}
				}
			}
			// A held lease is not raised past the exact range either.
			held := mustAcquire(t, s, req("floor-held", "h"), true)
			if res, err := fr.RaiseFence(ctx, req("floor-held", "h"), 1<<53+1); err == nil && res.Fence < 1<<53+1 {
				t.Errorf("RaiseFence of a held lease (fence %d) to 2^53+1: %+v, want ErrInvalid or the fence", held.Fence, res)
			}
		})
	}
}

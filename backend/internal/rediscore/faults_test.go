package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// noLeaks checks, after everything t started has been cleaned up, that no goroutine outlives
// the scenario. t must run alone (no test in parallel with it, but its own subtests).
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// storeCount counts the Stores a fault scenario has made.
type storeCount struct{ atomic.Int32 }

// wait returns once the scenario has made its Stores (history.Fault: six holders' and the
// long holder's), so that the fault comes while the workload runs, not while it starts: on a
// loaded machine the workload's start can take longer than the scenario's first sleep, and a
// Store made during the fault fails the test (a valkey client dials as it is made).
func (c *storeCount) wait(t *testing.T) {
	t.Helper()
	poll.Until(t, "the scenario's seven Stores made", func() bool { return c.Load() >= 7 })
}

// TestFaultServerKilledAndRestartedEmpty: SIGKILL mid-workload, restarted without its data.
// Leases are forgotten, so two holders may believe they hold until the old one's refresh fails;
// fences still never go back, and the resource refuses the stale holder.
func TestFaultServerKilledAndRestartedEmpty(t *testing.T) {
	testenv.SkipShort(t, "kills and restarts redis-server")
	noLeaks(t) // after both drivers' scenarios, which run at once
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			made := new(storeCount)
			history.Fault{
				NewStore: func() core.Store { s := mk(t, srv.Addr); made.Add(1); return s },
				TTL:      500 * time.Millisecond, Duration: 2 * time.Second,
				Linearizable: false, Lost: false,
				Inject: func() {
					made.wait(t)
					time.Sleep(700 * time.Millisecond)
					srv.Restart(t)
				},
			}.Run(t)
		})
	}
}

// The scenarios below check that a lease is reported lost by its deadline, with an allowance
// for a loaded machine's timer lateness: they run one at a time, before the parallel tests, the
// two drivers' runs of each at once (each on a server of its own), or in turn under -race.

// parallelUnlessRace runs t in parallel with its siblings, unless the race detector, which
// makes every goroutine several times slower, would stretch the timings t bounds.
func parallelUnlessRace(t *testing.T) {
	if !testenv.Race {
		t.Parallel()
	}
}

// TestFaultServerPausedPastTTL: SIGSTOP for three TTLs, then SIGCONT. Holders cannot refresh:
// each lease is reported lost before its deadline; calls return within their deadlines; the
// server keeps its data, so the history is linearizable.
func TestFaultServerPausedPastTTL(t *testing.T) {
	testenv.SkipShort(t, "pauses redis-server")
	noLeaks(t) // after both drivers' scenarios
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			parallelUnlessRace(t)
			srv := redistest.StartServer(t)
			const ttl = 400 * time.Millisecond
			made := new(storeCount)
			history.Fault{
				NewStore: func() core.Store { s := mk(t, srv.Addr); made.Add(1); return s },
				TTL:      ttl, Duration: 3 * time.Second,
				Linearizable: true, Lost: true,
				Inject: func() {
					made.wait(t)
					time.Sleep(600 * time.Millisecond)
					pauseProcess(srv.Pid())
					time.Sleep(3 * ttl)
					resumeProcess(srv.Pid())
				},
			}.Run(t)
		})
	}
}

// TestFaultHolderStallsPastTTL: a holder whose refresh stops (a long GC pause) and that resumes
// after its TTL finds the lock taken by another, with a higher fence; its write, fenced by Redis
// itself (Store.Fenced: a MULTI/EXEC under the resource's fence record), is refused and lands
// nothing. The history (the store's calls and the writes) is linearizable, fences increase and
// no write was accepted out of fence order.
func TestFaultHolderStallsPastTTL(t *testing.T) {
	noLeaks(t) // after both drivers' scenarios, which run at once
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			var rec history.Recorder
			const ttl = 300 * time.Millisecond
			sa, sb := mk(t, srv.Addr), mk(t, srv.Addr)
			a, _ := primitives.NewMutex(history.Record(sa, &rec), "stall", primitives.WithTTL(ttl))
			b, _ := primitives.NewMutex(history.Record(sb, &rec), "stall", primitives.WithTTL(ttl), primitives.WithAcquireTimeout(5*time.Second))
			ctx := context.Background()
			la, err := a.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := fencedWrite(ctx, sa, &rec, "stall", "a", la.Fence()); err != nil {
				t.Fatalf("the first holder's write: %v", err)
			}
			la.StopRefresh() // the pause begins
			lb, err := b.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := fencedWrite(ctx, sb, &rec, "stall", "b", lb.Fence()); err != nil {
				t.Fatalf("the second holder's write: %v", err)
			}
			// The pause ends: the first holder, unaware, writes with its old fence.
			if err := fencedWrite(ctx, sa, &rec, "stall", "a", la.Fence()); !errors.Is(err, core.ErrStaleFence) {
				t.Errorf("the stale holder's write (fence %d after %d): %v, want ErrStaleFence", la.Fence(), lb.Fence(), err)
			}
			if got, want := fencedLog(t, srv.Addr, sa, "stall"), fmt.Sprint([]uint64{la.Fence(), lb.Fence()}); got != want {
				t.Errorf("writes in Redis %s, want %s", got, want)
			}
			if err := la.Release(ctx); !errors.Is(err, core.ErrLost) {
				t.Errorf("the stale holder's Release: %v, want ErrLost", err)
			}
			lb.Release(ctx)
			ops, ws := rec.Ops(), rec.Writes()
			v := append(history.Linearizable(ops, time.Minute), history.FencesIncrease(ops)...)
			if v = append(v, history.WritesInFenceOrder(ws)...); len(v) > 0 {
				t.Errorf("history: %v", v)
			}
			t.Logf("%d store operations and %d writes checked, %d stale writes refused", len(ops), len(ws), history.Refused(ws))
		})
	}
}

// fencedWrite appends fence to resource's log in Redis, fenced by the driver's Store.Fenced,
// and records the write in rec.
func fencedWrite(ctx context.Context, s redisharness.Store, rec *history.Recorder, resource, holder string, fence uint64) error {
	w := history.Write{Resource: resource, Holder: holder, Fence: fence, Call: time.Now()}
	var err error
	switch s := s.(type) {
	case *goredis.Store:
		err = s.Fenced(ctx, resource, fence, func(pipe redis.Pipeliner) error {
			pipe.RPush(ctx, "log"+s.FenceTag(resource), fence)
			return nil
		})
	case *valkey.Store:
		err = s.Fenced(ctx, resource, fence, func(b vk.Builder) (vk.Commands, error) {
			return vk.Commands{b.Rpush().Key("log" + s.FenceTag(resource)).Element(fmt.Sprint(fence)).Build()}, nil
		})
	default:
		err = fmt.Errorf("a %T has no fenced write", s)
	}
	w.Return = time.Now()
	w.Accepted, w.Stale = err == nil, errors.Is(err, core.ErrStaleFence)
	if !w.Accepted && !w.Stale {
		w.Err = err
	}
	rec.AddWrite(w)
	return err
}

// fencedLog returns the fences of the writes fencedWrite landed in resource's log, as "[f1 f2 …]".
func fencedLog(t *testing.T, addr string, s redisharness.Store, resource string) string {
	t.Helper()
	var tag string
	switch s := s.(type) {
	case *goredis.Store:
		tag = s.FenceTag(resource)
	case *valkey.Store:
		tag = s.FenceTag(resource)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	log, err := c.LRange(context.Background(), "log"+tag, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(log)
}

// TestFaultNetwork: clients reach the server through a proxy that adds latency, cuts every
// connection, then holds all traffic for three TTLs (a partition) before cutting and healing.
// Calls return within their deadlines, a lease held across the partition is reported lost by
// its deadline, and the server keeps its data, so the history is linearizable.
func TestFaultNetwork(t *testing.T) {
	testenv.SkipShort(t, "partitions the clients from redis-server")
	noLeaks(t) // after both drivers' scenarios
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			parallelUnlessRace(t)
			srv := redistest.StartServer(t)
			px := redistest.StartProxy(t, srv.Addr)
			const ttl = 400 * time.Millisecond
			made := new(storeCount)
			history.Fault{
				NewStore: func() core.Store { s := mk(t, px.Addr); made.Add(1); return s },
				TTL:      ttl, Duration: 4 * time.Second,
				Linearizable: true, Lost: true,
				Inject: func() {
					made.wait(t)
					time.Sleep(500 * time.Millisecond)
					px.SetLatency(30 * time.Millisecond)
					time.Sleep(700 * time.Millisecond)
					px.SetLatency(0)
					px.Cut()
					time.Sleep(300 * time.Millisecond)
					px.Hold(true)
					time.Sleep(3 * ttl)
					px.Cut()
					px.Hold(false)
				},
			}.Run(t)
		})
	}
}

// TestFaultRepliesLost: clients reach the server through a proxy that loses every fifth reply:
// for a second each reply is held back 300 ms, past its caller's ctx (100 ms), then delivered;
// for another it is dropped, its connection cut after 300 ms, and the client library (go-redis
// with its retries at their defaults) sends the command again. The server ran each call, so
// the caller's give-back and a retried command reach it after it. The history is linearizable
// (a failed call may have taken effect), fences increase, and each key is free again within
// its TTL and conformance.FreeBound of the workload's end. The lease held across the fault may
// lose a refresh's reply; if it is lost, it is reported by its deadline.
//
// Two client libraries run calls on past their ctx here, and the history allows it (Overrun),
// until the drivers bound them: a valkey call may return up to the hold after its ctx's
// deadline, since valkey-go redials a connection that broke (cut, or closed at a synchronous
// call's deadline) on the next call, and the calls meanwhile wait for its handshake, whose reply
// the proxy may hold, whatever their ctx (package valkey's doc: "in a dial, 10 s after ctx
// ended"); and a go-redis Register (a waiter's SUBSCRIBE) waits for the go-redis PubSub's lock,
// which its receiving goroutine holds while it redials the subscription connection after a
// cut, whatever the waiter's ctx: measured 568 ms after a 100 ms ctx ended.
func TestFaultRepliesLost(t *testing.T) {
	testenv.SkipShort(t, "loses replies for seconds")
	noLeaks(t) // after both drivers' scenarios
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			parallelUnlessRace(t)
			srv := redistest.StartServer(t)
			px := redistest.StartProxy(t, srv.Addr)
			const ttl, hold = time.Second, 300 * time.Millisecond
			overrun := map[string]time.Duration{"valkey": hold, "goredis": 2 * hold}
			made := new(storeCount)
			history.Fault{
				NewStore: func() core.Store { s := mk(t, px.Addr); made.Add(1); return s },
				TTL:      ttl, Duration: 3 * time.Second, CallBudget: 100 * time.Millisecond,
				Linearizable: true, MayLose: true,
				FreeAfter: ttl + conformance.FreeBound,
				Overrun:   overrun[name],
				Inject: func() {
					made.wait(t)
					time.Sleep(300 * time.Millisecond)
					px.LoseReplies(5, hold, false)
					time.Sleep(time.Second)
					px.LoseReplies(5, hold, true)
					time.Sleep(time.Second)
					px.LoseReplies(0, 0, false)
				},
			}.Run(t)
		})
	}
}

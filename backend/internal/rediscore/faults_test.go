package rediscore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
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
	for name, mk := range redisharness.Drivers {
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
// for a loaded machine's timer lateness: they run one at a time, each driver in turn.

// TestFaultServerPausedPastTTL: SIGSTOP for three TTLs, then SIGCONT. Holders cannot refresh:
// each lease is reported lost before its deadline; calls return within their deadlines; the
// server keeps its data, so the history is linearizable.
func TestFaultServerPausedPastTTL(t *testing.T) {
	testenv.SkipShort(t, "pauses redis-server")
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
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
					syscall.Kill(srv.Pid(), syscall.SIGSTOP)
					time.Sleep(3 * ttl)
					syscall.Kill(srv.Pid(), syscall.SIGCONT)
				},
			}.Run(t)
		})
	}
}

// TestFaultHolderStallsPastTTL: a holder whose refresh stops (a long GC pause) and that resumes
// after its TTL finds the lock taken by another, with a higher fence, and its write refused.
func TestFaultHolderStallsPastTTL(t *testing.T) {
	noLeaks(t) // after both drivers' scenarios, which run at once
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			var rec history.Recorder
			var res history.Resource
			const ttl = 300 * time.Millisecond
			a, _ := primitives.NewMutex(history.Record(mk(t, srv.Addr), &rec), "stall", primitives.WithTTL(ttl))
			b, _ := primitives.NewMutex(history.Record(mk(t, srv.Addr), &rec), "stall", primitives.WithTTL(ttl), primitives.WithAcquireTimeout(5*time.Second))
			ctx := context.Background()
			la, err := a.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Write(la.Fence()) {
				t.Fatal("the first holder's write was refused")
			}
			la.StopRefresh() // the pause begins
			lb, err := b.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Write(lb.Fence()) {
				t.Fatal("the second holder's write was refused")
			}
			// The pause ends: the first holder, unaware, writes with its old fence.
			if res.Write(la.Fence()) {
				t.Errorf("the stale holder's write (fence %d) was accepted after fence %d", la.Fence(), lb.Fence())
			}
			if err := la.Release(ctx); !errors.Is(err, core.ErrLost) {
				t.Errorf("the stale holder's Release: %v, want ErrLost", err)
			}
			lb.Release(ctx)
			ops := rec.Ops()
			if v := append(history.Linearizable(ops, time.Minute), history.FencesIncrease(ops)...); len(v) > 0 {
				t.Errorf("history: %v", v)
			}
		})
	}
}

// TestFaultNetwork: clients reach the server through a proxy that adds latency, cuts every
// connection, then holds all traffic for three TTLs (a partition) before cutting and healing.
// Calls return within their deadlines, a lease held across the partition is reported lost by
// its deadline, and the server keeps its data, so the history is linearizable.
func TestFaultNetwork(t *testing.T) {
	testenv.SkipShort(t, "partitions the clients from redis-server")
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
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

package rediscore_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// noLeaks checks, after everything t started has been cleaned up, that no goroutine outlives
// the scenario.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// fault is a fault scenario for underFault.
type fault struct {
	newStore func() core.Store // a Store of its own for each holder
	ttl      time.Duration     // the holders' TTL
	duration time.Duration     // how long the workload runs
	// linearizable says the fault keeps the server's data: the history must be linearizable.
	linearizable bool
	// lost says a holder that holds across the fault must be reported lost, by its deadline.
	lost   bool
	inject func() // brings the fault about, and ends it, while the workload runs
}

// underFault runs the fault workload — 6 mutex holders on 2 keys, each with its own Store from
// f.newStore, every call bounded by 2s — for f.duration while f.inject runs, and checks it.
func underFault(t *testing.T, f fault) {
	t.Helper()
	w := &history.Workload{Keys: 2, Workers: 6, TTL: f.ttl, Duration: f.duration, CallBudget: 2 * time.Second, NewStore: f.newStore}
	long, _ := primitives.NewMutex(history.Record(f.newStore(), &w.Recorder), "fault-long", primitives.WithTTL(f.ttl))
	l, err := long.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lostAt := make(chan time.Time, 1)
	go func() {
		<-l.Done()
		lostAt <- time.Now()
	}()
	stopProbe := probeTimerLateness()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(t)
	}()
	f.inject()
	<-done
	w.Check(t, f.linearizable)
	// The lease's timer fires at the deadline; a loaded machine fires every timer late, so the
	// allowance is 50ms plus the worst lateness a plain timer showed meanwhile.
	allow := 50*time.Millisecond + stopProbe()
	if !f.lost {
		l.Release(context.Background())
		<-lostAt
		return
	}
	select {
	case at := <-lostAt:
		if late := at.Sub(l.Deadline()); late > allow {
			t.Errorf("a holder across the fault was reported lost %v after its deadline (allowed %v)", late, allow)
		}
		if !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("a holder across the fault: Err = %v, want ErrLost", l.Err())
		}
	default:
		t.Error("a lease held across the fault was not reported lost")
	}
}

// probeTimerLateness measures, until the function it returns is called, how late a plain 10ms
// timer fires on this machine, and that function returns the worst lateness seen.
func probeTimerLateness() func() time.Duration {
	stop, done := make(chan struct{}), make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			t.Reset(10 * time.Millisecond)
			start := time.Now()
			select {
			case <-stop:
				done <- worst
				return
			case <-t.C:
				worst = max(worst, time.Since(start)-10*time.Millisecond)
			}
		}
	}()
	return func() time.Duration {
		close(stop)
		return <-done
	}
}

// TestFaultServerKilledAndRestartedEmpty: SIGKILL mid-workload, restarted without its data.
// Leases are forgotten, so two holders may believe they hold until the old one's refresh fails;
// fences still never go back, and the resource refuses the stale holder.
func TestFaultServerKilledAndRestartedEmpty(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			srv := redistest.StartServer(t)
			underFault(t, fault{
				newStore: func() core.Store { return mk(t, srv.Addr) },
				ttl:      500 * time.Millisecond, duration: 2 * time.Second,
				linearizable: false, lost: false,
				inject: func() {
					time.Sleep(700 * time.Millisecond)
					srv.Restart(t)
				},
			})
		})
	}
}

// TestFaultServerPausedPastTTL: SIGSTOP for three TTLs, then SIGCONT. Holders cannot refresh:
// each lease is reported lost before its deadline; calls return within their deadlines; the
// server keeps its data, so the history is linearizable.
func TestFaultServerPausedPastTTL(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			srv := redistest.StartServer(t)
			const ttl = 400 * time.Millisecond
			underFault(t, fault{
				newStore: func() core.Store { return mk(t, srv.Addr) },
				ttl:      ttl, duration: 3 * time.Second,
				linearizable: true, lost: true,
				inject: func() {
					time.Sleep(600 * time.Millisecond)
					syscall.Kill(srv.Pid(), syscall.SIGSTOP)
					time.Sleep(3 * ttl)
					syscall.Kill(srv.Pid(), syscall.SIGCONT)
				},
			})
		})
	}
}

// TestFaultHolderStallsPastTTL: a holder whose refresh stops (a long GC pause) and that resumes
// after its TTL finds the lock taken by another, with a higher fence, and its write refused.
func TestFaultHolderStallsPastTTL(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
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
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			srv := redistest.StartServer(t)
			px := redistest.StartProxy(t, srv.Addr)
			const ttl = 400 * time.Millisecond
			underFault(t, fault{
				newStore: func() core.Store { return mk(t, px.Addr) },
				ttl:      ttl, duration: 4 * time.Second,
				linearizable: true, lost: true,
				inject: func() {
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
			})
		})
	}
}

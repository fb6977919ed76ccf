package redisdriver_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// faultRun is a workload of mutex holders on a few keys, every call bounded by a ctx deadline,
// each holder writing to its key's fenced resource while it holds; it records the history and
// how late any call returned past its deadline.
type faultRun struct {
	rec       history.Recorder
	resources map[string]*history.Resource
	mu        sync.Mutex
	lateBy    time.Duration // the most any call returned after its ctx deadline
	calls     int
	lost      int // leases reported lost
	lostLate  int // leases whose loss was reported after their deadline had passed
}

const callBudget = 2 * time.Second

func (f *faultRun) late(deadline time.Time) {
	f.mu.Lock()
	f.calls++
	f.lateBy = max(f.lateBy, time.Since(deadline))
	f.mu.Unlock()
}

// run has workers per key hold the key's lock in turn for d, over stores from mk.
func (f *faultRun) run(t *testing.T, mk func() core.Store, keys, workers int, ttl, d time.Duration) {
	f.resources = map[string]*history.Resource{}
	for k := range keys {
		f.resources[fmt.Sprint("fault", k)] = &history.Resource{}
	}
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for w := range workers {
		key := fmt.Sprint("fault", w%keys)
		m, err := primitives.NewMutex(history.Record(mk(), &f.rec), key, primitives.WithTTL(ttl),
			primitives.WithAcquireTimeout(callBudget), primitives.WithRetryInterval(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for time.Now().Before(end) {
				f.once(m, key)
			}
		})
	}
	wg.Wait()
}

func (f *faultRun) once(m *primitives.Mutex, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), callBudget)
	defer cancel()
	dl, _ := ctx.Deadline()
	l, err := m.Acquire(ctx)
	f.late(dl)
	if err != nil {
		time.Sleep(5 * time.Millisecond)
		return
	}
	for range 3 {
		if l.Err() != nil {
			break
		}
		f.resources[key].Write(l.Fence())
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case <-l.Done():
		f.mu.Lock()
		f.lost++
		if time.Now().After(l.Deadline().Add(50 * time.Millisecond)) {
			f.lostLate++
		}
		f.mu.Unlock()
	default:
	}
	rctx, rcancel := context.WithTimeout(context.Background(), callBudget)
	defer rcancel()
	rdl, _ := rctx.Deadline()
	l.Release(rctx)
	f.late(rdl)
}

// check applies the checks every fault keeps: fences never go back, every call returns within
// its deadline (a 100ms allowance for the scheduler), and when the fault loses no server state,
// the history is linearizable.
func (f *faultRun) check(t *testing.T, linearizable bool) {
	t.Helper()
	ops := f.rec.Ops()
	if v := history.FencesIncrease(ops); len(v) > 0 {
		t.Errorf("fences: %v", v)
	}
	if linearizable {
		if v := history.Linearizable(ops, time.Minute); len(v) > 0 {
			t.Errorf("history: %v", v)
		}
	}
	if f.lateBy > 100*time.Millisecond {
		t.Errorf("a call returned %v after its ctx deadline", f.lateBy)
	}
	var accepted, refused int
	for _, r := range f.resources {
		a, rf := r.Counts()
		accepted, refused = accepted+a, refused+rf
	}
	t.Logf("%d store operations recorded, %d calls, %d leases lost, %d writes accepted, %d stale writes refused",
		len(ops), f.calls, f.lost, accepted, refused)
}

// TestFaultServerKilledAndRestartedEmpty: SIGKILL mid-workload, restarted without its data.
// Leases are forgotten, so two holders may believe they hold until the old one's refresh fails;
// fences still never go back, and the resource refuses the stale holder.
func TestFaultServerKilledAndRestartedEmpty(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			var f faultRun
			done := make(chan struct{})
			go func() {
				defer close(done)
				f.run(t, func() core.Store { return mk(t, srv.Addr) }, 2, 6, 500*time.Millisecond, 2*time.Second)
			}()
			time.Sleep(700 * time.Millisecond)
			srv.Restart(t)
			<-done
			f.check(t, false)
		})
	}
}

// TestFaultServerPausedPastTTL: SIGSTOP for three TTLs, then SIGCONT. Holders cannot refresh:
// each lease is reported lost before its deadline; calls return within their deadlines; the
// server keeps its data, so the history is linearizable.
func TestFaultServerPausedPastTTL(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			var f faultRun
			const ttl = 400 * time.Millisecond
			// A holder that holds across the pause, refreshing every TTL/3.
			long, _ := primitives.NewMutex(history.Record(mk(t, srv.Addr), &f.rec), "fault-long", primitives.WithTTL(ttl))
			l, err := long.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			lost := make(chan time.Time, 1)
			go func() {
				<-l.Done()
				lost <- time.Now()
			}()
			done := make(chan struct{})
			go func() {
				defer close(done)
				f.run(t, func() core.Store { return mk(t, srv.Addr) }, 2, 6, ttl, 3*time.Second)
			}()
			time.Sleep(600 * time.Millisecond)
			syscall.Kill(srv.Pid(), syscall.SIGSTOP)
			time.Sleep(3 * ttl)
			syscall.Kill(srv.Pid(), syscall.SIGCONT)
			<-done
			f.check(t, true)
			if f.lostLate > 0 {
				t.Errorf("%d leases were reported lost after their deadline had passed", f.lostLate)
			}
			select {
			case at := <-lost:
				if late := at.Sub(l.Deadline()); late > 20*time.Millisecond {
					t.Errorf("the long holder's loss was reported %v after its deadline", late)
				}
				if !errors.Is(l.Err(), core.ErrLost) {
					t.Errorf("the long holder's Err = %v, want ErrLost", l.Err())
				}
			default:
				t.Error("a lease held across a pause of three TTLs was not reported lost")
			}
		})
	}
}

// TestFaultHolderStallsPastTTL: a holder whose refresh stops (a long GC pause) and that resumes
// after its TTL finds the lock taken by another, with a higher fence, and its write refused.
func TestFaultHolderStallsPastTTL(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
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

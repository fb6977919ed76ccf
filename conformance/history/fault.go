package history

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Fault is a fault scenario for a Store: a Workload of 6 mutex holders on 2 keys, each with a
// Store of its own and every call bounded by CallBudget, runs for Duration while Inject brings
// the fault about and ends it; one more holder holds a lease across the whole run. Run checks
// the history, what that holder was told and, with FreeAfter, that no key stays held by nobody.
type Fault struct {
	// NewStore returns a Store of its own for each holder.
	NewStore func() core.Store
	// TTL is the holders' TTL; Duration how long the workload runs.
	TTL, Duration time.Duration
	// Linearizable says the fault keeps the server's data: the history must be linearizable.
	// Otherwise only fences must increase, and the fenced resources refuse stale writes.
	Linearizable bool
	// Lost says the lease held across the fault must be reported lost, by its deadline.
	// Otherwise it must survive and is released at the end.
	Lost bool
	// MayLose says the lease held across the fault may be lost or kept (a refresh whose reply
	// the fault lost until the lease's deadline loses it): if it is lost, it must be reported by
	// its deadline; if not, it is released at the end.
	MayLose bool
	// Inject brings the fault about, and ends it, while the workload runs; it returns when the
	// fault has ended.
	Inject func()
	// CallBudget bounds each call of the workload (its ctx's deadline); 0 means 2s.
	CallBudget time.Duration
	// Overrun is the Workload's: how much later than its deadline a call may return where the
	// client library is documented to run on.
	Overrun time.Duration
	// FreeAfter, when set, is how soon after the workload ended each of its keys must be
	// granted to a new holder: a grant whose reply was lost, given back or not, holds a key
	// for at most its TTL (and the store's resolution) and a bound (conformance.FreeBound).
	FreeAfter time.Duration
}

// Run runs the scenario and fails t on a violation.
func (f Fault) Run(t *testing.T) {
	t.Helper()
	budget := f.CallBudget
	if budget <= 0 {
		budget = 2 * time.Second
	}
	w := &Workload{Keys: 2, Workers: 6, TTL: f.TTL, Duration: f.Duration, CallBudget: budget, Overrun: f.Overrun, NewStore: f.NewStore}
	long, err := primitives.NewMutex(Record(f.NewStore(), &w.Recorder), "fault-long", primitives.WithTTL(f.TTL))
	if err != nil {
		t.Fatal(err)
	}
	l, err := long.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lostAt := make(chan time.Time, 1)
	go func() {
		<-l.Done()
		lostAt <- time.Now()
	}()
	// The loss may come after the workload's own probe has stopped (its deadline past the
	// workload's end, or reported while the histories are checked): this probe runs until the
	// loss is looked at.
	stopProbe := sync.OnceValue(probeTimerLateness())
	defer stopProbe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(t)
	}()
	f.Inject()
	<-done
	ended := time.Now()
	w.Check(t, f.Linearizable)
	if f.FreeAfter > 0 {
		f.checkFree(t, w, ended)
	}
	// The lease's timer fires at the deadline; a loaded machine fires every timer late, so the
	// allowance is 50ms plus the worst lateness a plain timer showed from the lease's grant on.
	allow := 50*time.Millisecond + max(w.lag, stopProbe())
	if f.MayLose && l.Err() != nil {
		f.Lost = true
	}
	if !f.Lost {
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

// checkFree fails t unless each of the workload's keys is granted to a new holder within
// FreeAfter of ended.
func (f Fault) checkFree(t *testing.T, w *Workload, ended time.Time) {
	t.Helper()
	for key := range w.resources {
		left := time.Until(ended.Add(f.FreeAfter))
		m, err := primitives.NewMutex(f.NewStore(), key, primitives.WithTTL(f.TTL), primitives.WithAcquireTimeout(max(left, time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Errorf("%s was not free %v after the workload ended (TTL %v, allowed %v): %v",
				key, time.Since(ended).Round(time.Millisecond), f.TTL, f.FreeAfter, err)
			continue
		}
		t.Logf("%s granted %v after the workload ended", key, time.Since(ended).Round(time.Millisecond))
		l.Release(context.Background())
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

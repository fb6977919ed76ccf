package history

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Fault is a fault scenario for a Store: a Workload of 6 mutex holders on 2 keys, each with a
// Store of its own and every call bounded by 2s, runs for Duration while Inject brings the fault
// about and ends it; one more holder holds a lease across the whole run. Run checks the history
// and what that holder was told.
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
	// Inject brings the fault about, and ends it, while the workload runs; it returns when the
	// fault has ended.
	Inject func()
}

// Run runs the scenario and fails t on a violation.
func (f Fault) Run(t *testing.T) {
	t.Helper()
	w := &Workload{Keys: 2, Workers: 6, TTL: f.TTL, Duration: f.Duration, CallBudget: 2 * time.Second, NewStore: f.NewStore}
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(t)
	}()
	f.Inject()
	<-done
	w.Check(t, f.Linearizable)
	// The lease's timer fires at the deadline; a loaded machine fires every timer late, so the
	// allowance is 50ms plus the worst lateness a plain timer showed during the workload.
	allow := 50*time.Millisecond + w.lag
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

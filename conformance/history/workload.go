package history

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Workload is a fault-injection workload: Workers mutex holders on Keys keys take the lock in
// turn for Duration, every call bounded by a ctx deadline of CallBudget, each holder writing to
// its key's fenced Resource while it holds. Every store call is recorded.
type Workload struct {
	Keys, Workers int
	TTL           time.Duration
	Duration      time.Duration
	CallBudget    time.Duration
	// NewStore returns the Store a worker uses (one per worker: separate processes, in effect).
	NewStore func() core.Store

	Recorder  Recorder
	resources map[string]*Resource

	mu       sync.Mutex
	calls    int
	lateBy   time.Duration // the most any call returned after its ctx deadline
	lost     int           // leases reported lost while held
	lostLate int           // of those, reported after their deadline had passed
}

// Run runs the workload and returns when every worker has stopped.
func (w *Workload) Run(t testing.TB) {
	t.Helper()
	w.resources = map[string]*Resource{}
	for k := range w.Keys {
		w.resources[fmt.Sprint("fault", k)] = &Resource{}
	}
	var wg sync.WaitGroup
	end := time.Now().Add(w.Duration)
	for i := range w.Workers {
		key := fmt.Sprint("fault", i%w.Keys)
		m, err := primitives.NewMutex(Record(w.NewStore(), &w.Recorder), key, primitives.WithTTL(w.TTL),
			primitives.WithAcquireTimeout(w.CallBudget), primitives.WithRetryInterval(10*time.Millisecond))
		if err != nil {
			t.Error(err) // Run may be on a goroutine of its own: no Fatal
			break
		}
		wg.Go(func() {
			for time.Now().Before(end) {
				w.once(m, key)
			}
		})
	}
	wg.Wait()
}

func (w *Workload) late(deadline time.Time) {
	w.mu.Lock()
	w.calls++
	w.lateBy = max(w.lateBy, time.Since(deadline))
	w.mu.Unlock()
}

func (w *Workload) once(m *primitives.Mutex, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), w.CallBudget)
	defer cancel()
	dl, _ := ctx.Deadline()
	l, err := m.Acquire(ctx)
	w.late(dl)
	if err != nil {
		time.Sleep(5 * time.Millisecond)
		return
	}
	for range 3 {
		if l.Err() != nil {
			break
		}
		w.resources[key].Write(l.Fence())
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case <-l.Done():
		w.mu.Lock()
		w.lost++
		if time.Now().After(l.Deadline().Add(50 * time.Millisecond)) {
			w.lostLate++
		}
		w.mu.Unlock()
	default:
	}
	rctx, rcancel := context.WithTimeout(context.Background(), w.CallBudget)
	defer rcancel()
	rdl, _ := rctx.Deadline()
	l.Release(rctx)
	w.late(rdl)
}

// Check applies the checks every fault keeps: fences never go back, every call returns within
// its deadline (allowing 100ms for the scheduler), no lease is reported lost after its deadline,
// and, when the fault loses no store state (linearizable), the history fits the model. It logs
// the figures.
func (w *Workload) Check(t testing.TB, linearizable bool) {
	t.Helper()
	ops := w.Recorder.Ops()
	if v := FencesIncrease(ops); len(v) > 0 {
		t.Errorf("fences: %v", v)
	}
	if linearizable {
		if v := Linearizable(ops, time.Minute); len(v) > 0 {
			t.Errorf("history: %v", v)
		}
	}
	if w.lateBy > 100*time.Millisecond {
		t.Errorf("a call returned %v after its ctx deadline", w.lateBy)
	}
	if w.lostLate > 0 {
		t.Errorf("%d leases were reported lost after their deadline had passed", w.lostLate)
	}
	var accepted, refused int
	for _, r := range w.resources {
		a, rf := r.Counts()
		accepted, refused = accepted+a, refused+rf
	}
	t.Logf("%d store operations checked, %d calls, %d leases lost, %d writes accepted, %d stale writes refused",
		len(ops), w.calls, w.lost, accepted, refused)
}

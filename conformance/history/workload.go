package history

import (
	"context"
	"fmt"
	"slices"
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
	// Overrun is how much later than its ctx's deadline a call may return, beyond the
	// allowance for a loaded machine, where the client library is documented to run on (0:
	// none).
	Overrun time.Duration

	Recorder  Recorder
	resources map[string]*Resource

	mu     sync.Mutex
	calls  int
	lateBy time.Duration // the most any call returned after its ctx deadline
	losses []loss        // every EventLost, when it came
	lag    time.Duration // the worst lateness of a plain timer during Run
}

// loss is a lease's EventLost: when it came, and the lease's deadline then.
type loss struct {
	key, holder  string
	at, deadline time.Time
}

// Run runs the workload and returns when every worker has stopped.
func (w *Workload) Run(t testing.TB) {
	t.Helper()
	w.resources = map[string]*Resource{}
	for k := range w.Keys {
		w.resources[fmt.Sprint("fault", k)] = &Resource{}
	}
	stopProbe := probeTimerLateness()
	defer func() { w.lag = stopProbe() }()
	var wg sync.WaitGroup
	end := time.Now().Add(w.Duration)
	for i := range w.Workers {
		key := fmt.Sprint("fault", i%w.Keys)
		m, err := primitives.NewMutex(Record(w.NewStore(), &w.Recorder), key, primitives.WithTTL(w.TTL),
			primitives.WithAcquireTimeout(w.CallBudget), primitives.WithRetryInterval(10*time.Millisecond),
			primitives.WithEvents(w.event))
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

// event records when each lease's loss is reported: EventLost is emitted where the loss is
// declared (the lease's timer, or the call that found it), not where a worker next looks.
func (w *Workload) event(e primitives.Event) {
	if e.Kind != primitives.EventLost {
		return
	}
	l := loss{key: e.Key, holder: e.Holder, at: time.Now(), deadline: e.Lease.Deadline()}
	w.mu.Lock()
	w.losses = append(w.losses, l)
	w.mu.Unlock()
}

// lateLosses returns, for each loss reported more than allow after it was due, by how much. A
// loss is due at the lease's deadline; but a lease's timer stops while its holder releases it,
// so when the holder's Release to the store began before the deadline (or before the allowance
// after it ran out) and returned after it, the loss is due when that Release returned.
func lateLosses(losses []loss, ops []Op, allow time.Duration) []time.Duration {
	type lease struct{ key, holder string }
	releases := map[lease][]Op{}
	for _, op := range ops {
		if op.Kind == Release {
			k := lease{op.Key, op.Holder}
			releases[k] = append(releases[k], op)
		}
	}
	var late []time.Duration
	for _, l := range losses {
		due := l.deadline
		for _, r := range releases[lease{l.key, l.holder}] {
			if !r.Call.After(l.deadline.Add(allow)) && r.Return.After(due) && !r.Return.After(l.at) {
				due = r.Return
			}
		}
		if d := l.at.Sub(due); d > allow {
			late = append(late, d)
		}
	}
	return late
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
	rctx, rcancel := context.WithTimeout(context.Background(), w.CallBudget)
	defer rcancel()
	rdl, _ := rctx.Deadline()
	l.Release(rctx)
	w.late(rdl)
}

// Check applies the checks every fault keeps: fences never go back, every call returns within
// its deadline (allowing 100ms plus the worst timer lateness measured during Run), no lease's
// loss is reported after its deadline, or after the reply to a Release in flight then (allowing
// 50ms plus that lateness), and, when the fault loses no store state (linearizable), the
// history fits the model. It logs the figures.
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
	// A lease's timer may still report a loss after Run has returned: read under the lock.
	w.mu.Lock()
	lateBy, losses, calls := w.lateBy, slices.Clone(w.losses), w.calls
	w.mu.Unlock()
	// A call that ignores its ctx returns a try's timeout late (seconds); the base allowance is
	// for a goroutine the race detector and a loaded machine hold back beyond the timer probe's lag.
	if allow := 250*time.Millisecond + w.lag + w.Overrun; lateBy > allow {
		t.Errorf("a call returned %v after its ctx deadline (allowed %v)", lateBy, allow)
	}
	allow := 50*time.Millisecond + w.lag
	if late := lateLosses(losses, ops, allow); len(late) > 0 {
		t.Errorf("%d leases were reported lost after their deadline had passed, the latest by %v (allowed %v)", len(late), slices.Max(late), allow)
	}
	var accepted, refused int
	for _, r := range w.resources {
		a, rf := r.Counts()
		accepted, refused = accepted+a, refused+rf
	}
	t.Logf("%d store operations checked, %d calls, %d leases lost, %d writes accepted, %d stale writes refused, timers up to %v late",
		len(ops), calls, len(losses), accepted, refused, w.lag)
}

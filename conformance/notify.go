package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// joinLine makes holder a waiter the way the primitives do: an Acquire refused with a Wait, then
// Register with the same request. It skips the test when the store has no notifications (the
// suite was told WithoutNotifier) and fails it when the store has none but should.
func (s *suite) joinLine(k keyAt, holder string, permits, limit int) core.Wake {
	k.t.Helper()
	return s.joinLineWith(k, k.request(holder, permits, limit, time.Minute))
}

// joinLineWith is joinLine for the request req (its Wait is set to a minute).
func (s *suite) joinLineWith(k keyAt, req core.AcquireRequest) core.Wake {
	t, st, key, holder := k.t, k.st, k.key, req.Holder
	t.Helper()
	n := s.notifier(t, st)
	req.Wait = time.Minute
	if res, err := st.Acquire(ctxFor(t), req); err != nil || res.Granted {
		t.Fatalf("Acquire(%q, %s) = %+v, %v; want a refusal", key, holder, res, err)
	}
	w, err := n.Register(ctxFor(t), req)
	if err != nil {
		t.Fatalf("Register(%q): %v", key, err)
	}
	t.Cleanup(func() { w.Close() })
	// A store may need a moment to confirm a subscription; its waiters are woken then. Wait
	// for that, and clear the wake, so that the test sees only the wakes it causes.
	poll.Within(t, s.wake, fmt.Sprintf("a waiter on %q Reliable", key), func() (struct{}, bool) { return struct{}{}, w.Reliable() })
	select {
	case <-w.C():
	default:
	}
	return w
}

// notifier returns st as a core.Notifier. Without one it skips the test if the suite was told
// WithoutNotifier, and fails it otherwise.
func (s *suite) notifier(t *testing.T, st core.Store) core.Notifier {
	t.Helper()
	n, ok := st.(core.Notifier)
	switch {
	case !ok && s.noNotifier:
		t.Skipf("%T has no notifications (WithoutNotifier)", st)
	case !ok:
		t.Fatalf("%T does not implement core.Notifier, so its waiters would poll: forward Register "+
			"to the wrapped store's, or, if the store has no notifications by design, pass "+
			"conformance.WithoutNotifier() to Run", st)
	}
	return n
}

// testStoreIsNotifier: a store either has notifications or the harness says it has none.
func (s *suite) testStoreIsNotifier(t *testing.T) {
	st := s.h.NewStore(t)
	if _, ok := st.(core.Notifier); ok && s.noNotifier {
		t.Fatalf("Run was told WithoutNotifier, but %T implements core.Notifier: drop the option", st)
	}
	s.notifier(t, st)
}

// strayWindow is how long woken gives a wake that should not come to arrive. Absence can only
// be observed over a window; the wakes a test expects are waited for, not timed.
const strayWindow = 50 * time.Millisecond

// woken waits up to s.wake until want of ws are woken, and returns which were. When some of ws
// should stay asleep (want < len(ws)), it then gives stray wakes strayWindow to arrive. A store
// that wakes too few costs the whole wait; one that wakes the right ones, none.
func (s *suite) woken(want int, ws ...core.Wake) []bool {
	got := make([]bool, len(ws))
	take := func() {
		for i, w := range ws {
			select {
			case <-w.C():
				got[i] = true
			default:
			}
		}
	}
	deadline := time.Now().Add(s.wake)
	for take(); count(got) < want && time.Now().Before(deadline); take() {
		time.Sleep(time.Millisecond) // a bounded poll: the waiters' channels are many
	}
	if want < len(ws) {
		time.Sleep(strayWindow)
		take()
	}
	return got
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func (s *suite) testReleaseWakesWaiter(t *testing.T) {
	st, other, key := s.h.NewStore(t), s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 1, 1, time.Minute)
	w := s.joinLine(at(t, other, key), "b", 1, 1)
	at(t, st, key).release("a")
	if !s.woken(1, w)[0] {
		t.Fatalf("a waiter registered on one Store was not woken within %v of a release through another", s.wake)
	}
	at(t, other, key).grant("b", 1, 1, time.Minute)
}

func (s *suite) testReleaseWakesOneWaiterPerPermit(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 1, 3, time.Minute)
	at(t, st, key).grant("b", 2, 3, time.Minute)
	ws := []core.Wake{s.joinLine(at(t, st, key), "w0", 1, 3), s.joinLine(at(t, st, key), "w1", 1, 3), s.joinLine(at(t, st, key), "w2", 1, 3), s.joinLine(at(t, st, key), "w3", 1, 3)}
	at(t, st, key).release("a")
	got := s.woken(1, ws...)
	if count(got) != 1 || !got[0] {
		t.Fatalf("releasing 1 permit woke waiters %v, want only the first in line", got)
	}
	at(t, st, key).grant("w0", 1, 3, time.Minute) // the woken waiter takes the permit and leaves
	ws[0].Close()
	at(t, st, key).release("b")
	got = s.woken(2, ws[1:]...)
	if count(got) != 2 || !got[0] || !got[1] {
		t.Fatalf("releasing 2 permits woke waiters %v of those still waiting, want the first two in line", got)
	}
}

func (s *suite) testUnusedWakeIsPassedOn(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 1, 1, time.Minute)
	first := s.joinLine(at(t, st, key), "w0", 1, 1)
	second := s.joinLine(at(t, st, key), "w1", 1, 1)
	at(t, st, key).release("a")
	if got := s.woken(1, first, second); !got[0] || got[1] {
		t.Fatalf("release woke %v, want the first waiter alone", got)
	}
	first.Close() // gave up without trying
	if !s.woken(1, second)[0] {
		t.Fatalf("a wake given up unused was not passed on to the next waiter")
	}
	at(t, st, key).grant("w1", 1, 1, time.Minute)
	// A store that granted the first waiter its lease from a line took it back when it gave up.
	snap, err := st.Inspect(ctxFor(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if hs := holders(snap); len(hs) != 1 || hs["w1"].Permits != 1 {
		t.Fatalf("after the first waiter gave up, leases %+v, want w1's alone", snap.Leases)
	}
}

// testLineIsStrictlyFIFO: the head of the line waits until its permits are free; nobody behind
// it, no newcomer and no single attempt takes permits meanwhile; then the release grants the
// head, and those behind it that fit, in order.
func (s *suite) testLineIsStrictlyFIFO(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 1, 3, time.Minute)
	at(t, st, key).grant("b", 2, 3, time.Minute)
	big := s.joinLine(at(t, st, key), "big", 3, 3)
	small := s.joinLine(at(t, st, key), "small", 1, 3)
	at(t, st, key).release("a")
	if got := s.woken(0, big, small); got[0] || got[1] {
		t.Fatalf("releasing 1 permit with a head asking 3 woke %v, want nobody", got)
	}
	if _, ok := holders(inspect(t, st, key))["small"]; ok {
		t.Fatal("a waiter behind the head was granted the freed permit: the line is not FIFO")
	}
	at(t, st, key).refuse("newcomer", 1, 3, time.Minute) // a single attempt: no Wait
	at(t, st, key).refuse("small", 1, 3, time.Minute)
	at(t, st, key).release("b")
	if got := s.woken(1, big, small); !got[0] || got[1] {
		t.Fatalf("freeing every permit woke %v, want the head alone (it takes all 3)", got)
	}
	at(t, st, key).grant("big", 3, 3, time.Minute)
	at(t, st, key).release("big")
	if !s.woken(1, small)[0] {
		t.Fatal("the waiter behind the head was not woken when its turn came")
	}
	at(t, st, key).grant("small", 1, 3, time.Minute)
}

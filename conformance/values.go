package conformance

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// testLeasesKeepTheirValues: a lease keeps the value of the request that granted or renewed it;
// Inspect and Extend report it, and a value may hold any bytes up to core.MaxValueLen.
func (s *suite) testLeasesKeepTheirValues(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	long := strings.Repeat("x", core.MaxValueLen)
	odd := "host a\n1 2 q\x00{k}%7B"
	for holder, v := range map[string]string{"a": "host-a pid 4242", "b": long, "c": odd, "d": ""} {
		req := at(t, st, key).request(holder, 1, 4, time.Minute)
		req.Value = v
		if res, err := st.Acquire(ctxFor(t), req); err != nil || !res.Granted {
			t.Fatalf("Acquire(%s, value of %d bytes) = %+v, %v; want granted", holder, len(v), res, err)
		}
	}
	hs := holders(inspect(t, st, key))
	for holder, v := range map[string]string{"a": "host-a pid 4242", "b": long, "c": odd, "d": ""} {
		if got := hs[holder].Value; got != v {
			t.Errorf("Inspect: %s's value is %.40q, want %.40q", holder, got, v)
		}
	}
	// A renewal keeps the value it is sent; Extend leaves it and reports it.
	req := at(t, st, key).request("a", 1, 4, time.Minute)
	req.Value = "host-a pid 4243"
	if res, err := st.Acquire(ctxFor(t), req); err != nil || !res.Granted {
		t.Fatalf("re-Acquire(a) = %+v, %v; want granted", res, err)
	}
	res, err := st.Extend(ctxFor(t), core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute})
	if err != nil || res.Value != "host-a pid 4243" {
		t.Errorf("Extend(a) = %+v, %v; want the value of its latest grant", res, err)
	}
	if got := holders(inspect(t, st, key))["a"].Value; got != "host-a pid 4243" {
		t.Errorf("after a renewal with a new value, Inspect reports %q", got)
	}
}

// testInspectListsTheLine: a store that keeps a line reports its waiters head first, with their
// permits and values; a waiter granted leaves the list, and one that gives up too.
func (s *suite) testInspectListsTheLine(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 2, 2, time.Minute)
	if _, ok := st.(core.Notifier); !ok && s.noNotifier {
		at(t, st, key).refuse("b", 1, 2, time.Minute)
		if w := inspect(t, st, key).Waiters; len(w) != 0 {
			t.Fatalf("a store without a line reports waiters %+v", w)
		}
		return
	}
	want := []core.WaiterInfo{{Holder: "w0", Permits: 2, Value: "first"}, {Holder: "w1", Permits: 1, Value: ""}, {Holder: "w2", Permits: 1, Value: "third in line"}}
	ws := make([]core.Wake, len(want))
	for i, w := range want {
		req := at(t, st, key).request(w.Holder, w.Permits, 2, time.Minute)
		req.Value = w.Value
		ws[i] = s.joinLineWith(at(t, st, key), req)
	}
	if got := inspect(t, st, key).Waiters; !equalWaiters(got, want) {
		t.Fatalf("Inspect: waiters %+v, want %+v", got, want)
	}
	ws[1].Close() // the middle one gives up
	at(t, st, key).release("a")
	if !s.woken(1, ws[0])[0] {
		t.Fatal("the head was not woken by the release")
	}
	if got, rest := inspect(t, st, key).Waiters, []core.WaiterInfo{want[2]}; !equalWaiters(got, rest) {
		t.Fatalf("after the head was granted and the middle gave up: waiters %+v, want %+v", got, rest)
	}
}

func equalWaiters(a, b []core.WaiterInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testLineGrantsCarryTheWaitersValue: a lease the line grants carries the value the waiter
// asked with, before the waiter takes it and after.
func (s *suite) testLineGrantsCarryTheWaitersValue(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 1, 1, time.Minute)
	req := at(t, st, key).request("w", 1, 1, time.Minute)
	req.Value = "waiter w"
	w := s.joinLineWith(at(t, st, key), req)
	at(t, st, key).release("a")
	if !s.woken(1, w)[0] {
		t.Fatal("the waiter was not woken by the release")
	}
	if got := holders(inspect(t, st, key))["w"].Value; got != "waiter w" {
		t.Errorf("the line's grant has value %q, want the waiter's", got)
	}
	if res, err := st.Acquire(ctxFor(t), req); err != nil || !res.Granted {
		t.Fatalf("the waiter's Acquire = %+v, %v; want its grant", res, err)
	}
	if got := holders(inspect(t, st, key))["w"].Value; got != "waiter w" {
		t.Errorf("the taken grant has value %q, want the waiter's", got)
	}
}

// testWatchSeesGrantsAndReleases: a core.Watcher's watch hears of a new lease, a release, and a
// grant the line makes; a closed watch hears nothing more.
func (s *suite) testWatchSeesGrantsAndReleases(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	wr, ok := st.(core.Watcher)
	if !ok {
		t.Skipf("%T does not implement core.Watcher", st)
	}
	w, err := wr.Watch(ctxFor(t), key)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%T cannot watch: %v", st, err)
	}
	if err != nil {
		t.Fatalf("Watch(%q): %v", key, err)
	}
	defer w.Close()
	poll.Within(t, s.wake, fmt.Sprintf("a watch on %q Reliable", key), func() (struct{}, bool) { return struct{}{}, w.Reliable() })
	drain := func() {
		for {
			select {
			case <-w.C():
			default:
				return
			}
		}
	}
	expect := func(what string) {
		t.Helper()
		select {
		case <-w.C():
		case <-time.After(s.wake):
			t.Fatalf("the watch heard nothing within %v of %s", s.wake, what)
		}
		drain()
	}
	drain()
	at(t, st, key).grant("a", 1, 1, time.Minute)
	expect("a grant")
	at(t, st, key).release("a")
	expect("a release")
	if _, ok := st.(core.Notifier); ok {
		at(t, st, key).grant("b", 1, 1, time.Minute)
		expect("a grant")
		s.joinLine(at(t, st, key), "c", 1, 1)
		drain()
		at(t, st, key).release("b")
		expect("a release that granted the line")
		if _, held := holders(inspect(t, st, key))["c"]; !held {
			t.Fatal("the release did not grant the waiter")
		}
	}
	w.Close()
	w.Close() // idempotent
}

// testValuesThatLookLikeAFormat: values that look like a store's own syntax — newlines, " q",
// digits and spaces, NUL, a length prefix — come back exactly, as a lease's, as a waiter's and as
// an untaken grant's value; a grant from the line that its waiter gives back is gone, value and
// all, so that a full lease is granted next. A Watcher's store is watched throughout, so that
// whatever it keeps for its watchers sits beside the values.
func (s *suite) testValuesThatLookLikeAFormat(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	if wr, ok := st.(core.Watcher); ok {
		if w, err := wr.Watch(ctxFor(t), key); err == nil {
			defer w.Close()
		}
	}
	values := []string{"\n", " q", "1 2", "1 2 q\n3", "q", "\x00", "a\x00b\n", "5 abc", "2 7 hello\n",
		"0 99999999999999", strings.Repeat("\n", core.MaxValueLen), strings.Repeat("9 ", core.MaxValueLen/2)}
	for i, v := range values {
		a := at(t, st, key).request("a", 1, 1, time.Minute)
		a.Value = v
		if res, err := st.Acquire(ctxFor(t), a); err != nil || !res.Granted {
			t.Fatalf("value %d: Acquire(a) = %+v, %v; want granted", i, res, err)
		}
		b := at(t, st, key).request("b", 1, 1, time.Minute)
		b.Value = v + "#b"
		w := s.joinLineWith(at(t, st, key), b)
		snap := inspect(t, st, key)
		if len(snap.Leases) != 1 || snap.Leases[0].Value != v || len(snap.Waiters) != 1 || snap.Waiters[0].Value != v+"#b" {
			t.Fatalf("value %d %.40q: Inspect = %+v; want a's lease and b waiting, with their values", i, v, snap)
		}
		at(t, st, key).release("a")
		snap = inspect(t, st, key)
		if len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" || snap.Leases[0].Value != v+"#b" || len(snap.Waiters) != 0 {
			t.Fatalf("value %d %.40q: after the release, Inspect = %+v; want b's grant from the line, with its value", i, v, snap)
		}
		w.Close() // gives the untaken grant back (a driver may tell its server in the background)
		poll.Within(t, s.wake, fmt.Sprintf("value %d: nothing left once the waiter gave its grant back", i), func() (core.Snapshot, bool) {
			snap := inspect(t, st, key)
			return snap, len(snap.Leases) == 0 && len(snap.Waiters) == 0
		})
		at(t, st, key).grant("c", 1, 1, time.Minute) // nothing of b's is left to count
		at(t, st, key).release("c")
	}
}

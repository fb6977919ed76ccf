package conformance

import (
	"reflect"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func (s *suite) testFencesStrictlyIncrease(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	var last uint64
	check := func(f uint64, how string) {
		t.Helper()
		if f <= last {
			t.Fatalf("fence %d after %s is not above the previous %d", f, how, last)
		}
		last = f
	}
	for i := range 10 {
		check(at(t, st, key).grant("a", 1, 2, time.Minute), "a release")
		check(at(t, st, key).grant("b", 1, 2, time.Minute), "a concurrent grant")
		at(t, st, key).release("a")
		if i%3 == 2 {
			at(t, st, key).release("b")
		} else {
			at(t, st, key).grant("b", 1, 2, time.Minute) // re-grant: same fence, no check
			at(t, st, key).release("b")
		}
	}
	ttl := s.shortTTL(20 * time.Millisecond)
	check(s.grantAfterReleases(at(t, st, key), "a", 1, 1, ttl), "a release")
	s.elapse(2 * ttl)
	check(at(t, st, key).grant("b", 1, 1, time.Minute), "an expiry")
}

// fenceRaiser returns the store as a core.FenceRaiser, or skips the test: the capability is
// optional (only a Redlock node needs it, and redlock.New refuses a store without it). A store
// that has a method of the interface by name but is no core.FenceRaiser (a wrapper that forgot
// the other method, or got a signature wrong) fails instead: skipping would hide the mistake
// until redlock.New refuses the store.
func fenceRaiser(t *testing.T, st core.Store) core.FenceRaiser {
	t.Helper()
	fr, ok := st.(core.FenceRaiser)
	if !ok {
		v := reflect.ValueOf(st)
		for _, m := range []string{"AcquireAbove", "RaiseFence"} {
			if v.MethodByName(m).IsValid() {
				t.Fatalf("%T has a method %s but does not implement core.FenceRaiser: implement both "+
					"AcquireAbove and RaiseFence with the interface's signatures, or neither", st, m)
			}
		}
		t.Skipf("%T does not implement core.FenceRaiser (optional: redlock.New refuses it as a node)", st)
	}
	return fr
}

// testAcquireAboveFloorsNewGrantsOnly: AcquireAbove lifts a new grant's fence to the floor, and
// the key's counter with it, but never changes a lease the holder already holds; a grant the
// line makes to a request that waited carries its floor too.
func (s *suite) testAcquireAboveFloorsNewGrantsOnly(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	fr, ctx := fenceRaiser(t, st), ctxFor(t)
	// A store may take fences from its clock in microseconds: a floor an hour above the last
	// fence stays above the clock however slowly the calls below run.
	floor := at(t, st, key).grant("x", 1, 2, time.Minute) + uint64(time.Hour/time.Microsecond)
	at(t, st, key).release("x")
	req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 2, TTL: time.Minute}
	if res, err := fr.AcquireAbove(ctx, req, floor); err != nil || !res.Granted || res.Fence != floor {
		t.Fatalf("AcquireAbove(floor %d), a new grant: %+v, %v; want granted at the floor", floor, res, err)
	}
	if res, err := fr.AcquireAbove(ctx, req, floor+100); err != nil || !res.Granted || res.Fence != floor {
		t.Fatalf("AcquireAbove(floor %d) by the holder: %+v, %v; want its own fence %d kept", floor+100, res, err, floor)
	}
	if f := at(t, st, key).grant("b", 1, 2, time.Minute); f <= floor {
		t.Fatalf("grant after a floor of %d: fence %d, want above it", floor, f)
	}
	// The line: c waits with a floor well above the counter; the release grants it at least that.
	lineFloor := floor + uint64(time.Hour/time.Microsecond)
	wait := core.AcquireRequest{Key: key, Holder: "c", Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute}
	if res, err := fr.AcquireAbove(ctx, wait, lineFloor); err != nil || res.Granted {
		t.Fatalf("AcquireAbove with both permits held: %+v, %v; want a refusal", res, err)
	}
	at(t, st, key).release("a")
	res, err := fr.AcquireAbove(ctx, wait, lineFloor)
	if err != nil || !res.Granted || res.Fence < lineFloor {
		t.Fatalf("the waiter's next AcquireAbove after a release: %+v, %v; want granted at %d or above", res, err, lineFloor)
	}
}

// testRaiseFenceRaisesHeldLeases: RaiseFence lifts the fence of a lease the holder holds (never
// lowers it), raises the key's counter so later grants are above it, and gives a new grant at
// least the fence.
func (s *suite) testRaiseFenceRaisesHeldLeases(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	fr, ctx := fenceRaiser(t, st), ctxFor(t)
	f := at(t, st, key).grant("a", 1, 2, time.Minute)
	req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 2, TTL: time.Minute}
	if res, err := fr.RaiseFence(ctx, req, f+1000); err != nil || !res.Granted || res.Fence != f+1000 {
		t.Fatalf("RaiseFence(%d) of a held lease: %+v, %v; want granted with that fence", f+1000, res, err)
	}
	if got := holders(inspect(t, st, key))["a"].Fence; got != f+1000 {
		t.Errorf("Inspect after raising: fence %d, want %d", got, f+1000)
	}
	if res, err := fr.RaiseFence(ctx, req, 1); err != nil || res.Fence != f+1000 {
		t.Errorf("RaiseFence(1): %+v, %v; want the fence kept at %d", res, err, f+1000)
	}
	if g := at(t, st, key).grant("b", 1, 2, time.Minute); g <= f+1000 {
		t.Errorf("grant after a raise: fence %d, want above %d", g, f+1000)
	}
	at(t, st, key).release("b")
	req.Holder = "c"
	if res, err := fr.RaiseFence(ctx, req, f+5000); err != nil || !res.Granted || res.Fence < f+5000 {
		t.Errorf("RaiseFence(%d), a new grant: %+v, %v; want granted at %d or above", f+5000, res, err, f+5000)
	}
}

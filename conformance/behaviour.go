package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func (s *suite) testAcquireGrantsUpToLimit(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	for _, h := range []string{"a", "b", "c"} {
		at(t, st, key).grant(h, 1, 3, time.Minute)
	}
	if r := at(t, st, key).refuse("d", 1, 3, time.Minute); r <= 0 || r > time.Minute {
		t.Errorf("refusal RetryAfter = %v, want in (0, 1m]", r)
	}
	if got := inspect(t, st, key).InUse(); got != 3 {
		t.Errorf("Inspect: %d permits in use, want 3", got)
	}
}

func (s *suite) testWeightedAcquiresShareKeySpace(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 3, 4, time.Minute)
	at(t, st, key).refuse("b", 2, 4, time.Minute)
	at(t, st, key).grant("c", 1, 4, time.Minute)
	at(t, st, key).refuse("d", 1, 4, time.Minute)
	at(t, st, key).release("a")
	s.grantAfterReleases(at(t, st, key), "b", 2, 4, time.Minute)
	at(t, st, key).grant("d", 1, 4, time.Minute)
	if got := inspect(t, st, key).InUse(); got != 4 {
		t.Errorf("Inspect: %d permits in use, want 4", got)
	}
}

func (s *suite) testRefusalReportsRetryAfter(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	sinceA := time.Now()
	at(t, st, key).grant("a", 1, 3, 10*time.Second)
	sinceB := time.Now()
	at(t, st, key).grant("b", 2, 3, 4*time.Second)
	// One more permit needs b's two (expiring first) freed; three need a's as well.
	r2 := at(t, st, key).refuse("c", 1, 3, time.Minute)
	spentB := time.Since(sinceB)
	r3 := at(t, st, key).refuse("c", 3, 3, time.Minute)
	spentA := time.Since(sinceA)
	if s.manual {
		if r2 != 4*time.Second || r3 != 10*time.Second {
			t.Errorf("RetryAfter = %v for 1 permit, %v for 3, want 4s and 10s", r2, r3)
		}
		return
	}
	// A TTL's time left is short by the time the calls took, and by up to its resolution on a
	// store that keeps time coarsely (WithResolution); never long. A second more is allowed for
	// a store's own margin (Redlock's clock drift).
	if r2 <= 3*time.Second-s.resolution-spentB || r2 > 4*time.Second ||
		r3 <= 9*time.Second-s.resolution-spentA || r3 > 10*time.Second {
		t.Errorf("RetryAfter = %v for 1 permit, %v for 3, want about 4s and 10s (the calls took %v)",
			r2, r3, spentA.Round(time.Millisecond))
	}
}

func (s *suite) testAcquireIsIdempotentPerHolder(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	f := at(t, st, key).grant("a", 2, 3, time.Minute)
	if g := at(t, st, key).grant("a", 2, 3, time.Minute); g != f {
		t.Errorf("re-acquire by the holder: fence %d, want the lease's own %d", g, f)
	}
	_, err := st.Acquire(ctxFor(t), core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 3, TTL: time.Minute})
	if !errors.Is(err, core.ErrInvalid) {
		t.Errorf("re-acquire by the holder with other permits: err = %v, want ErrInvalid", err)
	}
	snap := inspect(t, st, key)
	if len(snap.Leases) != 1 || snap.Leases[0].Permits != 2 || snap.Leases[0].Fence != f {
		t.Errorf("after re-acquires: leases %+v, want one of holder a with 2 permits and fence %d", snap.Leases, f)
	}
}

func (s *suite) testExtendOnlyByHolder(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	f := at(t, st, key).grant("a", 2, 2, 2*time.Second)
	if _, err := st.Extend(ctxFor(t), core.ExtendRequest{Key: key, Holder: "b", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
		t.Errorf("Extend by a non-holder: err = %v, want ErrLost", err)
	}
	res, err := st.Extend(ctxFor(t), core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Extend by the holder: %v", err)
	}
	if res.Permits != 2 || res.Fence != f || res.Limit != 2 {
		t.Errorf("Extend = %+v, want permits 2, fence %d, limit 2", res, f)
	}
	if l := holders(inspect(t, st, key))["a"]; l.TTL <= 2*time.Second {
		t.Errorf("after Extend to 1m, TTL left = %v", l.TTL)
	}
	if _, ok := holders(inspect(t, st, key))["b"]; ok {
		t.Errorf("Extend by a non-holder created a lease")
	}
}

func (s *suite) testExtendSetsExpiryFromNow(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 1, 1, time.Hour)
	if _, err := st.Extend(ctxFor(t), core.ExtendRequest{Key: key, Holder: "a", TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if ttl := holders(inspect(t, st, key))["a"].TTL; ttl <= 0 || ttl > 2*time.Second {
		t.Errorf("after Extend to 2s from a 1h lease, TTL left = %v, want in (0, 2s]", ttl)
	}
	if !s.manual {
		return // on real time the TTL left is the check: waiting it out would only cost 2 s
	}
	s.elapse(2 * time.Second)
	if _, ok := holders(inspect(t, st, key))["a"]; ok {
		t.Errorf("the lease outlived the shorter TTL it was extended to")
	}
}

func (s *suite) testReleaseOnlyByHolder(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 1, 1, time.Minute)
	if at(t, st, key).release("b") {
		t.Errorf("Release by a non-holder reported true")
	}
	if _, ok := holders(inspect(t, st, key))["a"]; !ok {
		t.Fatalf("Release by a non-holder ended the holder's lease")
	}
	at(t, st, key).refuse("b", 1, 1, time.Minute)
	if !at(t, st, key).release("a") {
		t.Errorf("Release by the holder reported false")
	}
	if at(t, st, key).release("a") {
		t.Errorf("second Release by the holder reported true")
	}
	at(t, st, key).grant("b", 1, 1, time.Minute)
}

// testReleaseEndsOneLease: a release names a lease by holder and fence, so the release of a stale
// lease under a reused holder id never ends the newer one.
func (s *suite) testReleaseEndsOneLease(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	ttl := s.shortTTL(50 * time.Millisecond)
	first := at(t, st, key).grant("a", 1, 1, ttl)
	s.elapse(2 * ttl)
	second := at(t, st, key).grant("a", 1, 1, time.Minute)
	if at(t, st, key).releaseFence("a", first) {
		t.Errorf("Release of the expired lease (fence %d) reported true", first)
	}
	if l, ok := holders(inspect(t, st, key))["a"]; !ok || l.Fence != second {
		t.Fatalf("Release of the expired lease (fence %d) ended the holder's newer lease (fence %d)", first, second)
	}
	if at(t, st, key).releaseFence("a", second+1) {
		t.Errorf("Release with a fence never granted reported true")
	}
	if !at(t, st, key).releaseFence("a", second) {
		t.Errorf("Release of the lease by its holder and fence reported false")
	}
	if n := len(inspect(t, st, key).Leases); n != 0 {
		t.Errorf("after the release, %d leases remain", n)
	}
}

func (s *suite) testExpiryFreesPermits(t *testing.T) {
	st := s.h.NewStore(t)
	// b must ask while a's lease holds: where b's grant came only after a's TTL by this clock
	// (a loaded machine, a pooler in the way), the refusal proves nothing, and the test asks
	// again on a new key with twice the TTL.
	var key string
	ttl := s.shortTTL(50 * time.Millisecond)
	for {
		key = newKey(t)
		began := time.Now()
		at(t, st, key).grant("a", 1, 1, ttl)
		res := at(t, st, key).acquire("b", 1, 1, time.Minute)
		if !res.Granted {
			break
		}
		if time.Since(began) < ttl || ttl >= 5*time.Second {
			t.Fatalf("Acquire(%q, holder \"b\") granted (fence %d) while a's lease of %v held, want refused", key, res.Fence, ttl)
		}
		ttl *= 2
	}
	s.elapse(2 * ttl)
	if n := len(inspect(t, st, key).Leases); n != 0 {
		t.Errorf("Inspect after expiry: %d leases, want 0", n)
	}
	if _, err := st.Extend(ctxFor(t), core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
		t.Errorf("Extend of an expired lease: err = %v, want ErrLost", err)
	}
	at(t, st, key).grant("b", 1, 1, time.Minute)
	if at(t, st, key).release("a") {
		t.Errorf("Release of an expired lease reported true")
	}
	if _, ok := holders(inspect(t, st, key))["b"]; !ok {
		t.Errorf("Release of an expired lease ended the new holder's lease")
	}
}

func (s *suite) testInspectReportsLeases(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	if snap := inspect(t, st, key); len(snap.Leases) != 0 {
		t.Fatalf("Inspect of an unused key: %+v, want no leases", snap)
	}
	fa := at(t, st, key).grant("a", 1, 5, 30*time.Second)
	fb := at(t, st, key).grant("b", 3, 5, time.Minute)
	snap := inspect(t, st, key)
	if snap.Limit != 5 {
		t.Errorf("Inspect: limit %d, want 5", snap.Limit)
	}
	if len(snap.Leases) != 2 || snap.Leases[0].Fence > snap.Leases[1].Fence {
		t.Fatalf("Inspect: leases %+v, want 2 ordered by fence", snap.Leases)
	}
	m := holders(snap)
	if a := m["a"]; a.Permits != 1 || a.Fence != fa || a.TTL <= 0 || a.TTL > 30*time.Second {
		t.Errorf("Inspect: holder a = %+v, want 1 permit, fence %d, TTL in (0, 30s]", a, fa)
	}
	if b := m["b"]; b.Permits != 3 || b.Fence != fb || b.TTL <= 30*time.Second || b.TTL > time.Minute {
		t.Errorf("Inspect: holder b = %+v, want 3 permits, fence %d, TTL in (30s, 1m]", b, fb)
	}
	if again := inspect(t, st, key); len(again.Leases) != 2 {
		t.Errorf("a second Inspect saw %d leases: Inspect changed state", len(again.Leases))
	}
}

func (s *suite) testKeysAreIndependent(t *testing.T) {
	st, k1, k2 := s.h.NewStore(t), newKey(t), newKey(t)
	at(t, st, k1).grant("a", 1, 1, time.Minute)
	at(t, st, k2).grant("b", 1, 1, time.Minute)
	at(t, st, k1).refuse("b", 1, 1, time.Minute)
	if at(t, st, k2).release("a") {
		t.Errorf("Release of a holder's lease on another key reported true")
	}
	if n := len(inspect(t, st, k1).Leases); n != 1 {
		t.Errorf("key 1 has %d leases, want 1", n)
	}
}

func (s *suite) testCanceledContextChangesNothing(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	at(t, st, key).grant("a", 1, 2, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := st.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 2, TTL: time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a canceled ctx: err = %v, want one wrapping context.Canceled", err)
	}
	if _, err := st.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Release with a canceled ctx: err = %v, want one wrapping context.Canceled", err)
	}
	if _, err := st.Extend(ctx, core.ExtendRequest{Key: key, Holder: "a", TTL: time.Hour}); !errors.Is(err, context.Canceled) {
		t.Errorf("Extend with a canceled ctx: err = %v, want one wrapping context.Canceled", err)
	}
	if _, err := st.Inspect(ctx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("Inspect with a canceled ctx: err = %v, want one wrapping context.Canceled", err)
	}
	// Tries that would wait, refused or granted, send nothing either: no place, no lease, and
	// no leave in the background (Inspect waits for a Store's leaves started before it).
	free := newKey(t)
	for _, req := range []core.AcquireRequest{
		{Key: key, Holder: "w", Permits: 2, Limit: 2, TTL: time.Minute, Wait: time.Minute},
		{Key: free, Holder: "w", Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute},
	} {
		if _, err := st.Acquire(ctx, req); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire that would wait, with a canceled ctx: err = %v, want one wrapping context.Canceled", err)
		}
	}
	if snap := inspect(t, st, free); len(snap.Leases)+len(snap.Waiters)+len(snap.Delayed) != 0 {
		t.Errorf("after a canceled try on a free key: %+v, want nothing held or waiting", snap)
	}
	snap := inspect(t, st, key)
	if len(snap.Waiters) != 0 {
		t.Errorf("after a canceled try that would wait: waiters %+v, want none", snap.Waiters)
	}
	m := holders(snap)
	if _, ok := m["a"]; !ok || len(m) != 1 || m["a"].TTL > time.Minute {
		t.Errorf("after canceled calls: leases %+v, want a's alone, unextended", m)
	}
}

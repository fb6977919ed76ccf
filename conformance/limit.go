package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// mismatch asks for req and fails the test unless the store refuses it with a
// *core.LimitMismatchError naming held and req.Limit.
func (k keyAt) mismatch(req core.AcquireRequest, held int) {
	k.t.Helper()
	res, err := k.st.Acquire(ctxFor(k.t), req)
	var lm *core.LimitMismatchError
	switch {
	case err == nil:
		k.t.Fatalf("Acquire(%q, holder %q, limit %d, wait %v) = %+v, nil; want an error wrapping ErrLimitMismatch (the key's limit is %d)",
			k.key, req.Holder, req.Limit, req.Wait, res, held)
	case !errors.Is(err, core.ErrLimitMismatch) || !errors.As(err, &lm):
		k.t.Fatalf("Acquire(%q, holder %q, limit %d): %v; want a *core.LimitMismatchError wrapping ErrLimitMismatch", k.key, req.Holder, req.Limit, err)
	case lm.Held != held || lm.Requested != req.Limit:
		k.t.Errorf("Acquire(%q, holder %q, limit %d): %v; want it to name the key's limit %d and the request's %d", k.key, req.Holder, req.Limit, err, held, req.Limit)
	}
}

// testKeyHasOneLimit: a request whose limit is not that of the key's leases or waiters is
// refused at once and changes nothing; once nobody holds or waits, the next limit is the key's.
func (s *suite) testKeyHasOneLimit(t *testing.T) {
	st, other, key := s.h.NewStore(t), s.h.NewStore(t), newKey(t)
	k, ko := at(t, st, key), at(t, other, key)
	fa := k.grant("a", 1, 2, time.Minute)
	k.grant("b", 1, 2, time.Minute)
	before := inspect(t, st, key)
	if before.Limit != 2 {
		t.Errorf("Inspect: limit %d, want 2 (the key's leases' limit)", before.Limit)
	}

	// A larger limit would let a third holder in beside two of limit 2; a smaller one, a mutex
	// beside them. Neither is admitted, waiting or not, through this Store or another.
	for _, req := range []core.AcquireRequest{
		ko.request("c", 1, 5, time.Minute),
		ko.request("c", 1, 1, time.Minute),
		k.request("c", 2, 3, time.Minute),
		withWait(ko.request("c", 1, 3, time.Minute), time.Minute),
		k.request("a", 1, 3, time.Minute), // the holder itself, with another limit
	} {
		ko.mismatch(req, 2)
	}
	after := inspect(t, st, key)
	if len(after.Waiters) != 0 {
		t.Errorf("after refused requests: waiters %+v, want none (a mismatch takes no place in the line)", after.Waiters)
	}
	if h := holders(after); len(h) != 2 || h["a"].Fence != fa || h["a"].TTL > before.Leases[0].TTL+time.Second || after.Limit != 2 {
		t.Errorf("after refused requests: %+v, want a's and b's leases as they were, limit 2", after)
	}

	// Once nobody holds the key, the next request's limit is the key's (at once, unless
	// WithLateReleases).
	k.release("a")
	k.release("b")
	s.grantAfterReleases(k, "c", 1, 5, time.Minute)
	if snap := inspect(t, st, key); snap.Limit != 5 {
		t.Errorf("Inspect after a grant of limit 5 on a free key: limit %d, want 5", snap.Limit)
	}
	ko.mismatch(ko.request("a", 1, 2, time.Minute), 5)
	k.grant("d", 4, 5, time.Minute)
}

// grantAfterReleases is k.grant for a request on a key whose leases in its way were just
// released: granted at once, unless the store finishes a release it has decided in the
// background (WithLateReleases: Redlock's nodes that answer after the quorum do). Then the
// request can meet the released leases (a refusal, or their limit: ErrLimitMismatch) until
// the store has, and is asked again; any other answer fails the test.
func (s *suite) grantAfterReleases(k keyAt, holder string, permits, limit int, ttl time.Duration) uint64 {
	k.t.Helper()
	if !s.lateReleases {
		return k.grant(holder, permits, limit, ttl)
	}
	return poll.For(k.t, fmt.Sprintf("a grant to %q once the leases in its way are released", holder), func() (uint64, bool) {
		res, err := k.st.Acquire(ctxFor(k.t), k.request(holder, permits, limit, ttl))
		switch {
		case errors.Is(err, core.ErrLimitMismatch), err == nil && !res.Granted:
			return 0, false
		case err != nil || res.Fence == 0:
			k.t.Fatalf("Acquire(%q, holder %q, permits %d, limit %d) on the released key = %+v, %v; want granted",
				k.key, holder, permits, limit, res, err)
		}
		return res.Fence, true
	})
}

func withWait(req core.AcquireRequest, wait time.Duration) core.AcquireRequest {
	req.Wait = wait
	return req
}

// testExpiryFreesTheKeysLimit: leases that expired unreleased hold the key's limit no longer;
// the next request's limit becomes the key's.
func (s *suite) testExpiryFreesTheKeysLimit(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	k := at(t, st, key)
	ttl := s.shortTTL(100 * time.Millisecond)
	k.grant("a", 1, 2, ttl)
	k.grant("b", 1, 2, ttl)
	s.elapse(2 * ttl)
	k.grant("c", 1, 5, time.Minute)
	if snap := inspect(t, st, key); snap.Limit != 5 || len(snap.Leases) != 1 {
		t.Errorf("Inspect after the leases of limit 2 expired and c took one of limit 5: %+v, want c's lease alone, limit 5", snap)
	}
	k.mismatch(k.request("a", 1, 2, time.Minute), 5)
}

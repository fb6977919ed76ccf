package conformance

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// testLockDelayOfTheLongestDuration: a lease of core.MaxDuration with a lock delay of
// core.MaxDuration (its end, expiry plus delay, about 200 years away) is granted, renewed and
// extended without an error or an overflow, and refuses others with a RetryAfter that did not
// wrap; a lease that expires with a delay of core.MaxDuration keeps its key closed for about
// that long, as Inspect and the refusals report it.
func (s *suite) testLockDelayOfTheLongestDuration(t *testing.T) {
	st := s.h.NewStore(t)
	long, expired := at(t, st, newKey(t)), at(t, st, newKey(t))
	const hour = time.Hour
	fa := long.grantDelayed("a", 1, 1, core.MaxDuration, core.MaxDuration)
	if after := long.refuse("b", 1, 1, time.Minute); after != 0 && (after < core.MaxDuration-hour || after > 2*core.MaxDuration) {
		t.Errorf("Acquire beside a lease of MaxDuration with a lock delay of MaxDuration: RetryAfter %v, want 0 or the lease's expiry (plus its delay)", after)
	}
	if _, err := st.Extend(ctxFor(t), core.ExtendRequest{Key: long.key, Holder: "a", TTL: core.MaxDuration}); err != nil {
		t.Errorf("Extend by MaxDuration of a lease with a lock delay of MaxDuration: %v", err)
	}
	if f := long.grantDelayed("a", 1, 1, core.MaxDuration, core.MaxDuration); f != fa {
		t.Errorf("the holder's Acquire again: fence %d, want its lease's %d", f, fa)
	}
	snap := inspect(t, st, long.key)
	if len(snap.Leases) != 1 || snap.Leases[0].Fence != fa || snap.Leases[0].TTL < core.MaxDuration-hour || snap.Leases[0].TTL > core.MaxDuration {
		t.Errorf("Inspect: leases %+v, delayed %+v; want a's at fence %d with about MaxDuration left", snap.Leases, snap.Delayed, fa)
	}

	ttl := s.shortTTL(50 * time.Millisecond)
	fe := expired.grantDelayed("a", 1, 1, ttl, core.MaxDuration)
	s.elapse(2 * ttl)
	if after := expired.refuse("b", 1, 1, time.Minute); after != 0 && (after < core.MaxDuration-hour || after > core.MaxDuration) {
		t.Errorf("Acquire during a lock delay of MaxDuration: RetryAfter %v, want about MaxDuration (or 0)", after)
	}
	expired.refuse("a", 1, 1, time.Minute)
	if _, err := st.Extend(ctxFor(t), core.ExtendRequest{Key: expired.key, Holder: "a", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
		t.Errorf("Extend of a lease in a lock delay of MaxDuration: err = %v, want ErrLost", err)
	}
	snap = inspect(t, st, expired.key)
	d, ok := delayedBy(snap, "a")
	if len(snap.Leases) != 0 || !ok || d.Fence != fe || d.Left < core.MaxDuration-hour || d.Left > core.MaxDuration {
		t.Errorf("Inspect during a lock delay of MaxDuration: leases %+v, delayed %+v; want a's (fence %d) with about MaxDuration left",
			snap.Leases, snap.Delayed, fe)
	}
}

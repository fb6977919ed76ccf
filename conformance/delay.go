package conformance

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// longDelay is the lock delay of the tests that check a delay holds: long enough that no stall of
// a loaded machine ends it before the test looks.
const longDelay = time.Hour

// acquireWith acquires req and fails the test on an error; it checks the result as acquire does.
func (k keyAt) acquireWith(req core.AcquireRequest) core.AcquireResult {
	k.t.Helper()
	res, err := k.st.Acquire(ctxFor(k.t), req)
	if err != nil {
		k.t.Fatalf("Acquire(%q, holder %q, permits %d, limit %d, lock delay %v): %v", k.key, req.Holder, req.Permits, req.Limit, req.LockDelay, err)
	}
	if res.TTL < 0 || res.TTL > req.TTL || (!res.Granted && res.TTL != 0) {
		k.t.Fatalf("Acquire(%q, holder %q) granted %v with TTL %v, want 0 or at most the request's %v", k.key, req.Holder, res.Granted, res.TTL, req.TTL)
	}
	return res
}

// grantDelayed grants holder permits of limit for ttl with a lock delay, and returns the fence.
func (k keyAt) grantDelayed(holder string, permits, limit int, ttl, delay time.Duration) uint64 {
	k.t.Helper()
	req := k.request(holder, permits, limit, ttl)
	req.LockDelay = delay
	res := k.acquireWith(req)
	if !res.Granted || res.Fence == 0 {
		k.t.Fatalf("Acquire(%q, holder %q, lock delay %v) = %+v, want granted with a fence", k.key, holder, delay, res)
	}
	return res.Fence
}

// delayedBy returns the snapshot's delayed lease of holder.
func delayedBy(snap core.Snapshot, holder string) (core.DelayInfo, bool) {
	for _, d := range snap.Delayed {
		if d.Holder == holder {
			return d, true
		}
	}
	return core.DelayInfo{}, false
}

// testLockDelayKeepsExpiredPermitsClosed: a lease that expires unreleased keeps its permits closed
// for its lock delay, to everyone, its own holder included; the lease itself is over (Extend
// ErrLost, Release false and the delay stays); Inspect lists it in Delayed, and the delayed
// permits count for the key's limit. Other permits of a semaphore stay free.
func (s *suite) testLockDelayKeepsExpiredPermitsClosed(t *testing.T) {
	st := s.h.NewStore(t)
	mutex, sem := at(t, st, newKey(t)), at(t, st, newKey(t))
	ttl := s.shortTTL(50 * time.Millisecond)
	fa := mutex.grantDelayed("a", 1, 1, ttl, longDelay)
	sem.grantDelayed("a", 2, 3, ttl, longDelay)
	s.elapse(2 * ttl)

	if after := mutex.refuse("b", 1, 1, time.Minute); after != 0 && after < longDelay/2 {
		t.Errorf("Acquire during a lock delay of %v: RetryAfter %v, want the time until the delay ends (or 0)", longDelay, after)
	}
	snap := inspect(t, st, mutex.key)
	d, ok := delayedBy(snap, "a")
	if len(snap.Leases) != 0 || !ok || d.Permits != 1 || d.Fence != fa || d.Left <= longDelay/2 || d.Left > longDelay {
		t.Errorf("Inspect during the lock delay: leases %+v, delayed %+v; want no lease and a's (1 permit, fence %d) with (%v, %v] left",
			snap.Leases, snap.Delayed, fa, longDelay/2, longDelay)
	}
	if snap.Limit != 1 {
		t.Errorf("Inspect during the lock delay: limit %d, want 1 (the delayed lease's)", snap.Limit)
	}
	if _, err := st.Extend(ctxFor(t), core.ExtendRequest{Key: mutex.key, Holder: "a", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
		t.Errorf("Extend of a lease in its lock delay: err = %v, want ErrLost", err)
	}
	if mutex.releaseFence("a", fa) {
		t.Errorf("Release of a lease in its lock delay reported true")
	}
	mutex.refuse("a", 1, 1, time.Minute)
	mutex.refuse("b", 1, 1, time.Minute)
	if _, ok := delayedBy(inspect(t, st, mutex.key), "a"); !ok {
		t.Errorf("after the expired holder's Release and Acquire, the lock delay is gone; want it kept")
	}
	if _, err := st.Acquire(ctxFor(t), mutex.request("c", 1, 2, time.Minute)); !errors.Is(err, core.ErrLimitMismatch) {
		t.Errorf("Acquire with limit 2 while a lease of limit 1 is in its lock delay: err = %v, want ErrLimitMismatch", err)
	}

	// The semaphore: a's 2 permits of 3 are closed, the third is free.
	sem.grant("b", 1, 3, time.Minute)
	sem.refuse("c", 1, 3, time.Minute)
	if snap := inspect(t, st, sem.key); snap.InUse() != 1 || snap.Closed() != 2 {
		t.Errorf("Inspect of the semaphore: %d permits in use, %d closed; want 1 and 2", snap.InUse(), snap.Closed())
	}
}

// testLockDelayNotAfterRelease: a lease released before its expiry leaves no delay.
func (s *suite) testLockDelayNotAfterRelease(t *testing.T) {
	st, key := s.h.NewStore(t), newKey(t)
	k := at(t, st, key)
	fa := k.grantDelayed("a", 1, 1, time.Minute, longDelay)
	if !k.releaseFence("a", fa) {
		t.Fatalf("Release of a held lease with a lock delay reported false")
	}
	if fb := k.grant("b", 1, 1, time.Minute); fb <= fa {
		t.Errorf("the grant after the release has fence %d, want above %d", fb, fa)
	}
	if d := inspect(t, st, key).Delayed; len(d) != 0 {
		t.Errorf("Inspect after a release: delayed %+v, want none", d)
	}
}

// testLockDelayEnds: once the delay passes the permits are free, at a higher fence; a holder
// that asked again without a delay set none; and a waiter's place keeps the delay its request
// asked for, for the grant the line makes it.
func (s *suite) testLockDelayEnds(t *testing.T) {
	st := s.h.NewStore(t)
	ends, renewed := at(t, st, newKey(t)), at(t, st, newKey(t))
	ttl := s.shortTTL(50 * time.Millisecond)
	delay := 50 * time.Millisecond // short on real time too: the wait below is the TTLs' plus this
	fa := ends.grantDelayed("a", 1, 1, ttl, delay)
	renewed.grantDelayed("a", 1, 1, ttl, longDelay)
	renewed.grantDelayed("a", 1, 1, ttl, 0) // the holder asks again: its lease now has no delay
	s.elapse(2 * (ttl + delay))
	if fb := ends.grant("b", 1, 1, time.Minute); fb <= fa {
		t.Errorf("the grant after the lock delay has fence %d, want above %d", fb, fa)
	}
	if d := inspect(t, st, ends.key).Delayed; len(d) != 0 {
		t.Errorf("Inspect after the lock delay ended: delayed %+v, want none", d)
	}
	renewed.grant("b", 1, 1, time.Minute)
}

// testLineWaitsOutTheLockDelay: the head of the line is not granted while a lock delay closes the
// permits it waits for; a grant the line makes keeps the delay the waiter asked for.
func (s *suite) testLineWaitsOutTheLockDelay(t *testing.T) {
	st := s.h.NewStore(t)
	k := at(t, st, newKey(t))
	ttl := s.shortTTL(50 * time.Millisecond)
	k.grant("a", 1, 1, time.Minute)
	req := k.request("b", 1, 1, ttl)
	req.LockDelay = longDelay
	s.joinLineWith(k, req)
	if !k.release("a") {
		t.Fatalf("Release of a's held lease reported false")
	}
	req.Wait = time.Minute
	if res := k.acquireWith(req); !res.Granted {
		t.Fatalf("the head of the line after the release: %+v, want granted", res)
	}
	// b's grant expires unreleased: its delay, asked for in line, closes the key to the next
	// waiter, who stays in line.
	c := k.request("c", 1, 1, time.Minute)
	s.joinLineWith(k, c)
	s.elapse(2 * ttl)
	c.Wait = time.Minute
	if res := k.acquireWith(c); res.Granted {
		t.Errorf("the head of the line during the lock delay of a line's grant: granted (fence %d), want refused", res.Fence)
	}
	snap := inspect(t, st, k.key)
	if _, ok := delayedBy(snap, "b"); !ok || len(snap.Leases) != 0 {
		t.Errorf("Inspect during the delay of the line's grant: leases %+v, delayed %+v; want b's delay and no lease", snap.Leases, snap.Delayed)
	}
}

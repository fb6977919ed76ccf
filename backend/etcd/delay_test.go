package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// delayed waits for key's lease of holder to have expired into its lock delay, and checks what
// the contract says of it then: it is listed in Snapshot.Delayed, its permits refuse newcomers
// and its own holder, Extend says ErrLost and Release reports false and ends nothing.
func delayed(t *testing.T, s core.Store, key, holder string, fence uint64) {
	t.Helper()
	ctx := context.Background()
	snap := poll.Within(t, 10*time.Second, "the lease expired into its lock delay", func() (core.Snapshot, bool) {
		snap, err := s.Inspect(ctx, key)
		return snap, err == nil && len(snap.Leases) == 0 && len(snap.Delayed) == 1
	})
	if d := snap.Delayed[0]; d.Holder != holder || d.Fence != fence || d.Left <= 0 || d.Left > time.Hour {
		t.Fatalf("Delayed = %+v; want %s's fence %d", d, holder, fence)
	}
	for _, h := range []string{"new", holder} {
		res, err := s.Acquire(ctx, req(key, h, 1, 1))
		if err != nil || res.Granted || res.RetryAfter <= 0 {
			t.Fatalf("Acquire(%s) in the lock delay = %+v, %v; want a refusal with a RetryAfter", h, res, err)
		}
	}
	if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: holder, TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
		t.Fatalf("Extend in the lock delay = %v; want ErrLost", err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder, Fence: fence}); err != nil || ok {
		t.Fatalf("Release in the lock delay = %v, %v; want false", ok, err)
	}
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Delayed) != 1 {
		t.Fatalf("after Release, Inspect = %+v, %v; want the delay still there", snap, err)
	}
}

// A lease that expires unreleased keeps its permits closed for its lock delay, then frees them; a
// released one leaves no delay.
func TestLockDelayClosesTheKeyAfterExpiryOnly(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	s := newStore(t)
	ctx := context.Background()
	r := req(key, "h", 1, 1)
	r.TTL, r.LockDelay = time.Second, time.Hour
	rel := mustAcquire(t, s, r)
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: rel.Fence}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	after := mustAcquire(t, s, req(key, "after-release", 1, 1))
	s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "after-release", Fence: after.Fence})

	r.LockDelay = 3 * time.Second
	res := mustAcquire(t, s, r)
	delayed(t, s, key, "h", res.Fence)
	poll.Within(t, r.LockDelay+2*resolution+5*time.Second, "the key free after the delay", func() (core.AcquireResult, bool) {
		res, err := s.Acquire(ctx, req(key, "later", 1, 1))
		return res, err == nil && res.Granted
	})
}

// A grant of the line carries its waiter's lock delay: taken and left to expire unreleased, it
// closes the key for the delay.
func TestGrantOfTheLineKeepsItsLockDelay(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	a, b := newStore(t), newStore(t)
	ctx := context.Background()
	h := mustAcquire(t, a, req(key, "h", 1, 1))
	wr := req(key, "w", 1, 1)
	wr.TTL, wr.LockDelay = time.Second, time.Hour
	w := mustWait(t, b, wr)
	if ok, err := a.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	waitWoken(t, w)
	res := mustAcquire(t, b, wr)
	w.Close()
	delayed(t, a, key, "w", res.Fence)
}

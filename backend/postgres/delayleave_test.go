package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestLeaveKeepsTheDelayOfAnExpiredLineGrant: a grant the line made to a waiter, with its
// place's lock delay, that expires untaken keeps its permits closed for the delay when the
// waiter then leaves the line: leave gives back only a grant still held.
func TestLeaveKeepsTheDelayOfAnExpiredLineGrant(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	req := func(holder string, wait, delay time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait, LockDelay: delay}
	}
	if res, err := s.Acquire(ctx, req("a", 0, 0)); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	enroll(t, s, req("b", time.Minute, time.Minute))
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	expireByHand(t, pool, key, "b") // the line's grant to b, untaken, expires
	if _, err := pool.Exec(ctx, `SELECT leasehold_leave($1, $2, NULL)`, []byte(key), []byte("b")); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Delayed) != 1 || snap.Delayed[0].Holder != "b" || len(snap.Leases) != 0 {
		t.Errorf("after b left the line: leases %+v, delayed %+v; want b's grant in its lock delay", snap.Leases, snap.Delayed)
	}
	if res, err := s.Acquire(ctx, req("c", 0, 0)); err != nil || res.Granted || !delayLeft(res.RetryAfter) {
		t.Errorf("Acquire(c) in the delay of b's expired grant: %+v, %v; want refused until the delay ends", res, err)
	}
}

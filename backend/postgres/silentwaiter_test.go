package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestLineGrantsNoPlaceTheLimitRuleCountsDead: a place taken while its Store could not listen,
// whose holder has not asked for ten minutes, counts as dead for the key's limit (and the sweep
// removes it); the line passes it over too, so a request of another limit, admitted because
// nothing live holds the key, is not granted beside a lease the line gives that place under
// the old limit.
func TestLineGrantsNoPlaceTheLimitRuleCountsDead(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := ownSchema(t) // it makes a place dead by hand, which a sweep would take
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	sweep(t, s) // the Stores' own sweeps, a minute apart, now leave the dead place to the test
	key := uniqueKey(t)
	req := func(holder string, limit int, ttl, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: limit, TTL: ttl, Wait: wait}
	}
	if res, err := s.Acquire(ctx, req("a", 1, time.Minute, 0)); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	enroll(t, s, req("b", 1, time.Minute, time.Minute))
	// b's Store could not listen when it took the place, and b has been silent since.
	if _, err := pool.Exec(ctx, `UPDATE leasehold_waiters SET pid = NULL, started = NULL, channel = NULL,
		tried = tried - 700000000 WHERE kh = sha256($1)`, []byte(key)); err != nil {
		t.Fatal(err)
	}
	// a's lease expires (by hand: a short TTL could end before b takes its place).
	if _, err := pool.Exec(ctx, `UPDATE leasehold_leases SET expires = 0 WHERE kh = sha256($1)`, []byte(key)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a's lease to expire", func() bool {
		snap, err := s.Inspect(ctx, key)
		return err == nil && len(snap.Leases) == 0
	})
	res, err := s.Acquire(ctx, req("c", 3, time.Minute, 0))
	if err != nil || !res.Granted {
		t.Fatalf("Acquire(c) of limit 3 with nothing live on the key: %+v, %v", res, err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "c" {
		t.Errorf("Inspect: %+v, %v; want c's lease alone", snap, err)
	}
}

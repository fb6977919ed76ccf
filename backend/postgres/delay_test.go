package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// The lock delay's tests expire leases by hand (a second ago, by the database's clock), and end
// their delays by hand: a TTL or a delay short enough to run out on its own could end before a
// loaded machine has made the checks that need it still running. Their delays are a minute, so
// what they check holds for about 59 s.

// expireByHand makes holder's lease on key expire a second ago, by the database's clock.
func expireByHand(t *testing.T, pool *pgxpool.Pool, key, holder string) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `UPDATE leasehold_leases
		SET expires = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 1000000
		WHERE kh = sha256($1) AND hh = sha256($2)`, []byte(key), []byte(holder))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire %q's lease: %v, %v", holder, tag, err)
	}
}

// endDelayByHand ends the lock delay of holder's lease on key, expired by hand.
func endDelayByHand(t *testing.T, pool *pgxpool.Pool, key, holder string) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `UPDATE leasehold_leases SET delay = 0
		WHERE kh = sha256($1) AND hh = sha256($2)`, []byte(key), []byte(holder))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("end the delay of %q's lease: %v, %v", holder, tag, err)
	}
}

// delayLeft reports whether d is what is left of a delay of a minute that began a second ago:
// at most 59 s, and more than 40 s (the test's own time).
func delayLeft(d time.Duration) bool { return d > 40*time.Second && d <= 59*time.Second }

// TestExpiredLeaseKeepsItsPermitsClosedForItsDelay: a lease granted with a lock delay that
// expires unreleased keeps the key closed: Inspect lists it as delayed (not as a lease) with the
// time left; another holder is refused, told to come back when the delay ends, and refused with
// another limit as a mismatch; the lease itself is over (Extend is ErrLost, Release reports
// false and ends no delay, its holder asking again is refused until the delay ends). Once the
// delay ends the key is free, for a higher fence.
func TestExpiredLeaseKeepsItsPermitsClosedForItsDelay(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	req := func(holder string, limit int) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: limit, TTL: time.Minute, LockDelay: time.Minute}
	}
	a, err := s.Acquire(ctx, req("a", 1))
	if err != nil || !a.Granted {
		t.Fatalf("Acquire(a): %+v, %v", a, err)
	}
	expireByHand(t, pool, key, "a")

	snap, err := s.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 0 || len(snap.Delayed) != 1 || snap.Limit != 1 {
		t.Fatalf("Inspect of the key in a's delay: %+v, %v; want a's lease delayed alone, limit 1", snap, err)
	}
	if d := snap.Delayed[0]; d.Holder != "a" || d.Permits != 1 || d.Fence != a.Fence || !delayLeft(d.Left) {
		t.Errorf("Delayed: %+v; want a's, 1 permit, fence %d, about 59s left", d, a.Fence)
	}
	if res, err := s.Acquire(ctx, req("b", 1)); err != nil || res.Granted || !delayLeft(res.RetryAfter) {
		t.Errorf("Acquire(b) in a's delay: %+v, %v; want refused, to retry when the delay ends (about 59s)", res, err)
	}
	mismatch(t, s, req("b", 2), 1)
	if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
		t.Errorf("Extend of the expired lease: %v; want ErrLost", err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: a.Fence}); err != nil || ok {
		t.Errorf("Release of the expired lease: %v, %v; want false", ok, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || ok {
		t.Errorf("Release of the expired lease, any fence: %v, %v; want false", ok, err)
	}
	if res, err := s.Acquire(ctx, req("a", 1)); err != nil || res.Granted || !delayLeft(res.RetryAfter) {
		t.Errorf("Acquire(a) again in its own delay: %+v, %v; want refused until the delay ends (about 59s)", res, err)
	}
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Delayed) != 1 {
		t.Errorf("Inspect after the release of the expired lease: %+v, %v; want its delay kept", snap, err)
	}

	endDelayByHand(t, pool, key, "a")
	b, err := s.Acquire(ctx, req("b", 1))
	if err != nil || !b.Granted || b.Fence <= a.Fence {
		t.Fatalf("Acquire(b) after a's delay: %+v, %v; want granted above fence %d", b, err, a.Fence)
	}
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Delayed) != 0 || len(snap.Leases) != 1 {
		t.Errorf("Inspect after the delay: %+v, %v; want b's lease, nothing delayed", snap, err)
	}
}

// TestDelayedPermitsCountOnASemaphore: on a key of limit 3, two delayed leases of a permit each
// leave room for 1 (beside a lease expired without a delay, purged): a request of 1 is granted,
// one of 2 is refused until a delay ends, and so is a delayed lease's holder asking again for 1,
// though it would fit; Inspect lists each delayed lease by fence.
func TestDelayedPermitsCountOnASemaphore(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	req := func(holder string, permits int) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: permits, Limit: 3, TTL: time.Minute, LockDelay: time.Minute}
	}
	var fences []uint64
	for _, h := range []string{"a", "b", "e"} {
		r := req(h, 1)
		if h == "e" {
			r.LockDelay = 0
		}
		res, err := s.Acquire(ctx, r)
		if err != nil || !res.Granted {
			t.Fatalf("Acquire(%s): %+v, %v", h, res, err)
		}
		fences = append(fences, res.Fence)
		expireByHand(t, pool, key, h)
	}
	if res, err := s.Acquire(ctx, req("c", 2)); err != nil || res.Granted || !delayLeft(res.RetryAfter) {
		t.Errorf("Acquire of 2 of 3 permits beside 2 delayed: %+v, %v; want refused until a delay ends", res, err)
	}
	if res, err := s.Acquire(ctx, req("a", 1)); err != nil || res.Granted || !delayLeft(res.RetryAfter) {
		t.Errorf("Acquire(a) again for 1 of 3 permits, in its own delay: %+v, %v; want refused until it ends", res, err)
	}
	if res, err := s.Acquire(ctx, req("d", 1)); err != nil || !res.Granted {
		t.Errorf("Acquire of 1 of 3 permits beside 2 delayed: %+v, %v; want granted", res, err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 1 || len(snap.Delayed) != 2 || snap.Closed() != 2 ||
		snap.Delayed[0].Fence != fences[0] || snap.Delayed[1].Fence != fences[1] {
		t.Errorf("Inspect: %+v, %v; want d's lease, and a's and b's delayed in fence order", snap, err)
	}
}

// TestReleasedLeaseLeavesNoDelay: a lease released before its expiry leaves the key free at once,
// whatever its lock delay.
func TestReleasedLeaseLeavesNoDelay(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, LockDelay: time.Minute}
	res, err := s.Acquire(ctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: res.Fence}); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	if got := keyRows(t, pool, key); got != noRows {
		t.Errorf("rows left by a released lease with a delay:\n%s", got)
	}
	req.Holder = "b"
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Errorf("Acquire(b) after a's release: %+v, %v; want granted", res, err)
	}
}

// TestLeaseKeepsTheDelayOfItsLatestGrant: an idempotent Acquire by the holder sets its lease's
// delay to the request's, and Extend keeps it: a lease granted with a delay and renewed without
// one expires free, one granted without and renewed with one, then extended, expires delayed.
func TestLeaseKeepsTheDelayOfItsLatestGrant(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	for _, c := range []struct {
		name           string
		first, renewed time.Duration
	}{{"delay dropped", time.Minute, 0}, {"delay set", 0, time.Minute}} {
		key := uniqueKey(t)
		req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, LockDelay: c.first}
		first, err := s.Acquire(ctx, req)
		if err != nil || !first.Granted {
			t.Fatalf("%s: Acquire: %+v, %v", c.name, first, err)
		}
		req.LockDelay = c.renewed
		if res, err := s.Acquire(ctx, req); err != nil || !res.Granted || res.Fence != first.Fence {
			t.Fatalf("%s: Acquire again: %+v, %v; want the same lease", c.name, res, err)
		}
		if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute}); err != nil {
			t.Fatalf("%s: Extend: %v", c.name, err)
		}
		expireByHand(t, pool, key, "a")
		snap, err := s.Inspect(ctx, key)
		if want := map[bool]int{false: 0, true: 1}[c.renewed > 0]; err != nil || len(snap.Delayed) != want {
			t.Errorf("%s: Inspect after the expiry: %+v, %v; want %d delayed", c.name, snap, err, want)
		}
		other := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute}
		if res, err := s.Acquire(ctx, other); err != nil || res.Granted != (c.renewed == 0) {
			t.Errorf("%s: Acquire(b) after the expiry: %+v, %v; want granted %v", c.name, res, err, c.renewed == 0)
		}
	}
}

// TestSweepKeepsDelayedLeases: the sweep leaves a lease in its lock delay, and the key's row, also
// when it removes a dead place in the key's line, and removes them once the delay has ended.
func TestSweepKeepsDelayedLeases(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := ownSchema(t) // it sweeps
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, LockDelay: time.Minute}
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	expireByHand(t, pool, key, "a")
	sweep(t, s)
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Delayed) != 1 {
		t.Fatalf("Inspect after a sweep in the delay: %+v, %v; want the lease delayed", snap, err)
	}
	// A place taken while its Store could not listen, whose holder has not asked for 11 minutes.
	enroll(t, s, core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
	if _, err := pool.Exec(ctx, "UPDATE leasehold_waiters SET pid = NULL, started = NULL, tried = tried - 660000000 WHERE kh = sha256($1)",
		[]byte(key)); err != nil {
		t.Fatal(err)
	}
	sweep(t, s)
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Delayed) != 1 || len(snap.Waiters) != 0 {
		t.Fatalf("Inspect after a sweep of the dead place in the delay: %+v, %v; want the lease delayed, no place", snap, err)
	}
	endDelayByHand(t, pool, key, "a")
	sweep(t, s)
	if got := keyRows(t, pool, key); got != noRows {
		t.Errorf("rows left after a sweep past the delay:\n%s", got)
	}
}

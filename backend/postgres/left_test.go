package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestTryGivenUpInFlightTakesNoPlace: a try that waits and failed in flight (its reply lost, its
// ctx ended) is left by its Store; when the leave reaches the server first, the try, arriving
// later, is refused and takes no place in the line, where nobody would take its grant. The same
// holder's next try, with another id, waits as usual; and another holder's try of the same id
// is not held back.
func TestTryGivenUpInFlightTakesNoPlace(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, url)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, url)
	ids := make(chan int64, 3)
	ids <- 7
	ids <- 7
	ids <- 8
	s.SetTries(func() int64 { return <-ids })
	s.LeaveTry(key, "w", 7)
	line := func() []core.WaiterInfo {
		snap, err := s.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Waiters
	}
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
		t.Fatalf("the late try: %+v, %v; want refused", res, err)
	}
	if w := line(); len(w) != 0 {
		t.Fatalf("the late try of a caller that gave up took a place: line %v", w)
	}
	other := req
	other.Holder = "x"
	if _, err := s.Acquire(ctx, other); err != nil {
		t.Fatal(err)
	}
	if w := line(); len(w) != 1 || w[0].Holder != "x" {
		t.Fatalf("another holder's try with the same id: line %v, want it in line", w)
	}
	if _, err := s.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if w := line(); len(w) != 2 || w[1].Holder != "w" {
		t.Fatalf("the holder's next try: line %v, want it in line behind x", w)
	}
}

// TestTryGivenUpInFlightIsRefusedOnAKeyNotInUse: the same on a key nobody holds, whose try takes
// the uncontended path (the key's row made and the lease granted in two statements): the late
// try is refused, takes no lease, and leaves no row behind.
func TestTryGivenUpInFlightIsRefusedOnAKeyNotInUse(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	s := newStore(t, url)
	s.SetTries(func() int64 { return 7 })
	s.LeaveTry(key, "w", 7)
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
		t.Fatalf("the late try: %+v, %v; want refused", res, err)
	}
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 0 || len(snap.Waiters) != 0 {
		t.Fatalf("after the late try: %+v, %v; want no lease and no line", snap, err)
	}
	var rows int
	if err := newPool(t, url).QueryRow(ctx, "SELECT count(*) FROM leasehold_keys WHERE key = $1::bytea", []byte(key)).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the key's rows after the late try: %d, %v; want none", rows, err)
	}
	s.SetTries(func() int64 { return 8 })
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("the holder's next try, of another id: %+v, %v; want granted", res, err)
	}
}

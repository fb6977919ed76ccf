package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// keyRows returns every row of key in the default tables, each with the transaction that wrote
// it (xmin), so that a row written again with the same values shows.
func keyRows(t testing.TB, pool *pgxpool.Pool, key string) string {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{"keys", "leases", "waiters", "left"} {
		rows, err := pool.Query(context.Background(),
			"SELECT x.xmin::text || ' ' || row_to_json(x)::text FROM leasehold_"+table+" x WHERE x.kh = sha256($1) ORDER BY 1",
			[]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(table + ": " + strings.Join(got, "\n  ") + "\n")
	}
	return b.String()
}

// mismatch asks for req and fails t unless it is refused with a *core.LimitMismatchError
// naming held.
func mismatch(t *testing.T, s core.Store, req core.AcquireRequest, held int) {
	t.Helper()
	res, err := s.Acquire(context.Background(), req)
	var lm *core.LimitMismatchError
	if !errors.As(err, &lm) || !errors.Is(err, core.ErrLimitMismatch) || lm.Held != held || lm.Requested != req.Limit {
		t.Fatalf("Acquire(holder %q, limit %d): %+v, %v; want a limit mismatch naming %d and %d", req.Holder, req.Limit, res, err, held, req.Limit)
	}
}

// TestLimitOfALineWithoutLeases: once the key's leases expired, the waiters in its line still
// give the key its limit: a request with another one is refused with their limit, and takes no
// place; Inspect reports the line's limit.
func TestLimitOfALineWithoutLeases(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 2, Limit: 2, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("the holder: %+v, %v", res, err)
	}
	enroll(t, s, core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute})
	// The holder's lease expires (by hand: a short TTL could end before w takes its place).
	if _, err := pool.Exec(ctx, "UPDATE leasehold_leases SET expires = 0 WHERE kh = sha256($1)", []byte(key)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the holder's lease to expire", func() bool {
		snap, err := s.Inspect(ctx, key)
		return err == nil && len(snap.Leases) == 0
	})
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Waiters) != 1 || snap.Limit != 2 {
		t.Fatalf("Inspect of a line without leases: %+v, %v; want one waiter, limit 2", snap, err)
	}
	other := newStore(t, url)
	for _, lim := range []int{1, 3} {
		mismatch(t, other, core.AcquireRequest{Key: key, Holder: "x", Permits: 1, Limit: lim, TTL: time.Minute, Wait: time.Minute}, 2)
	}
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "w" {
		t.Fatalf("after the refused requests: %+v, %v; want only w in line", snap, err)
	}
	// A request of the line's limit serves the line first: w is granted, x waits behind it.
	res, err := other.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "x", Permits: 2, Limit: 2, TTL: time.Minute})
	if err != nil || res.Granted {
		t.Fatalf("x with the line's limit: %+v, %v; want refused behind w's grant", res, err)
	}
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "w" {
		t.Fatalf("after x's request: %+v, %v; want w granted", snap, err)
	}
}

// TestRefusedLimitMismatchWritesNothing: a request with another limit than the key's — from a
// newcomer that would wait, from a waiter in line, from the holder itself, with a fence floor or
// raising the holder's fence — is refused without
// writing a row (none is written again, even with the same values) and without a notification
// to the key's watchers.
func TestRefusedLimitMismatchWritesNothing(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url, key := ownDatabase(t, serverURL(t)), uniqueKey(t) // it hears every change notified on its channel
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("the holder: %+v, %v", res, err)
	}
	enroll(t, s, core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
	watch, err := s.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	listen, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(ctx)
	if _, err := listen.Exec(ctx, "LISTEN leasehold_changed"); err != nil {
		t.Fatal(err)
	}
	before := keyRows(t, pool, key)
	other := newStore(t, url)
	for _, req := range []core.AcquireRequest{
		{Key: key, Holder: "x", Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute},
		{Key: key, Holder: "w", Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute},
		{Key: key, Holder: "h", Permits: 1, Limit: 3, TTL: time.Minute},
	} {
		mismatch(t, other, req, 1)
	}
	// A Redlock node's calls: with a floor, and raising the holder's fence.
	raise := []func(core.AcquireRequest) (core.AcquireResult, error){
		func(r core.AcquireRequest) (core.AcquireResult, error) { return other.AcquireAbove(ctx, r, 1<<60) },
		func(r core.AcquireRequest) (core.AcquireResult, error) { return other.RaiseFence(ctx, r, 1<<60) },
	}
	for _, call := range raise {
		for _, holder := range []string{"x", "h"} {
			_, err := call(core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 2, TTL: time.Minute})
			if !isMismatch(err, 1, 2) {
				t.Errorf("a fence-raising request of holder %q with limit 2: %v; want a limit mismatch", holder, err)
			}
		}
	}
	if after := keyRows(t, pool, key); after != before {
		t.Errorf("refused requests changed the key's rows:\nbefore\n%s\nafter\n%s", before, after)
	}
	// Notifications arrive in commit order: the first one heard after the requests is ours.
	if _, err := pool.Exec(ctx, "SELECT pg_notify('leasehold_changed', 'end')"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := listen.WaitForNotification(wctx)
	if err != nil || n.Payload != "end" {
		t.Errorf("first notification after the refused requests: %+v, %v; want only the test's own", n, err)
	}
}

// isMismatch reports whether err is a *core.LimitMismatchError naming held and requested.
func isMismatch(err error, held, requested int) bool {
	lm, ok := err.(*core.LimitMismatchError)
	return ok && lm.Held == held && lm.Requested == requested
}

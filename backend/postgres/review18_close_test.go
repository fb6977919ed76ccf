package postgres_test

// An adversarial review of the PostgreSQL driver (review18): each test turns a suspicion into a check.

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/core"
)

// deadListenDSN returns a DSN on which nothing listens: a Store given it as WithListenDSN has
// no listening connection, so its waiters' places name none.
func deadListenDSN(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=1"
}

// TestCloseLeavesItsWaitersPlaces: a Store closed while one of its callers waits in line (its
// Waiter still open: the caller is woken by Close and only then closes it) leaves that place
// itself, as Close says ("it first sends the leaves of the line its waiters owe"). Otherwise the
// place outlives the Store: when its listener was down at the try, nothing tells the line that
// the waiter is gone, the next release grants it the lock, and the lock sits untaken for its TTL
// while a live waiter behind it waits.
func TestCloseLeavesItsWaitersPlaces(t *testing.T) {
	for _, down := range []bool{true, false} {
		t.Run(map[bool]string{true: "listener down", false: "listener up"}[down], func(t *testing.T) {
			url, key := serverURL(t), uniqueKey(t)
			ctx := context.Background()
			var opts []postgres.Option
			if down {
				opts = append(opts, postgres.WithListenDSN(deadListenDSN(t)))
			}
			holder := newStore(t, url)
			if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			s := newStore(t, url, opts...)
			req := core.AcquireRequest{Key: key, Holder: "closed", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Hour}
			w := enroll(t, s, req)
			live := req
			live.Holder = "live"
			if res, err := holder.Acquire(ctx, live); err != nil || res.Granted {
				t.Fatalf("the live waiter's try: %+v, %v; want refused", res, err)
			}
			s.Close()
			w.Close() // the caller, woken by Close, stops waiting
			if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"}); err != nil || !ok {
				t.Fatalf("Release: %v, %v", ok, err)
			}
			snap, err := holder.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "live" {
				t.Errorf("after the closed Store's waiter and a release: leases %+v, line %+v; want the live waiter granted",
					snap.Leases, snap.Waiters)
			}
		})
	}
}

// TestCloseLeavesThePlaceOfATryInFlight: a waiting try is in flight (on a paused server) when its
// Store closes; the server resumes and refuses it with a place in line. Its caller cannot
// Register (the Store is closed), so nobody would close a Waiter for it: the Store leaves that
// place itself. With the listener down at the try, nothing else would: the place names no
// listening backend for the dead-waiter pass to find gone.
func TestCloseLeavesThePlaceOfATryInFlight(t *testing.T) {
	srv := pgtest.StartServer(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, srv.URL)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, srv.URL)
	s, err := postgres.New(pool, postgres.WithListenDSN(deadListenDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Inspect(ctx, key); err != nil { // warm the pool's connection and statements
		t.Fatal(err)
	}
	srv.Pause()
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Hour}
	type result struct {
		res core.AcquireResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Acquire(ctx, req)
		done <- result{res, err}
	}()
	waitFor(t, "the try to be in flight", func() bool { return pool.Stat().AcquiredConns() > 0 })
	s.Close()
	srv.Resume()
	r := <-done
	if r.err == nil && !r.res.Granted {
		if _, err := s.Register(ctx, req); err == nil {
			t.Fatal("Register after Close succeeded")
		}
	}
	if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	snap, err := holder.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Waiters) != 0 || len(snap.Leases) != 0 {
		t.Errorf("after a try in flight at Close (%+v, %v) and a release: leases %+v, line %+v; want the lock free",
			r.res, r.err, snap.Leases, snap.Waiters)
	}
}

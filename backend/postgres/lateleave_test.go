package postgres_test

import (
	"context"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/internal/faultproxy"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestLateLeaveSparesTheHolderNewerPlaceAndGrant: under a holder id its callers share, a waiter
// is closed and its leave, sent in the background, is held on the way; the same holder then
// tries again on the key and is told it waits, ahead of another waiter. The leave arrives as
// late as the Store lets it: after that try's answer and the grant the line makes it, if the
// Store answered the try first. It must not take out the place the holder was told it keeps,
// nor give the grant the line made it to the waiter behind: the key's lease goes to whoever was
// first in line when it was released, and the holder still waits or holds. The leave is a
// closed waiter's (of every place of the holder), or a try's whose answer was lost (of that
// try's place).
func TestLateLeaveSparesTheHolderNewerPlaceAndGrant(t *testing.T) {
	t.Parallel()
	t.Run("closed waiter", func(t *testing.T) {
		testLateLeave(t, func(s *postgres.Store, req core.AcquireRequest) {
			enroll(t, s, req).Close()
		})
	})
	t.Run("try given up in flight", func(t *testing.T) {
		testLateLeave(t, func(s *postgres.Store, req core.AcquireRequest) {
			const id = 42
			s.SetTries(func() int64 { return id })
			if res, err := s.Acquire(context.Background(), req); err != nil || res.Granted {
				t.Fatalf("the try of %q: %+v, %v; want refused", req.Holder, res, err)
			}
			s.SetTries(rand.Int64)
			s.LeaveTryInBackground(req.Key, req.Holder, id) // its answer lost
		})
	})
}

// testLateLeave is TestLateLeaveSparesTheHolderNewerPlaceAndGrant with leave, which takes req's
// place in the line and sends its leave.
func testLateLeave(t *testing.T, leave func(*postgres.Store, core.AcquireRequest)) {
	srv := server(t)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.Start(t, u.Host)
	u.Host = proxy.Addr
	// The simple protocol sends each call's text, so that the proxy finds the leave in it.
	s := storeOn(t, poolConfig(t, u.String(), func(c *pgxpool.Config) {
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}))
	other := newStore(t, srv.URL)
	pool := newPool(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	key := uniqueKey(t)
	req := func(holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	}
	if res, err := other.Acquire(ctx, req("a")); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	arrived, deliver := proxy.HoldRequest(`leasehold_leave"(`)
	t.Cleanup(deliver)
	leave(s, req("shared"))
	enroll(t, other, req("c")) // behind the shared holder
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the leave never reached the proxy")
	}

	type answer struct {
		res core.AcquireResult
		err error
	}
	again := make(chan answer, 1)
	go func() {
		res, err := s.Acquire(ctx, req("shared"))
		again <- answer{res, err}
	}()
	var a answer
	answered := false
	poll.Until(t, "the shared holder's next try answered, or waiting for its earlier leave", func() bool {
		select {
		case a = <-again:
			answered = true
			return true
		default:
			return s.AwaitingLeaves(key, "shared") > 0
		}
	})
	head := func() string {
		var h []byte
		if err := pool.QueryRow(ctx, "SELECT holder FROM leasehold_waiters WHERE kh = sha256($1) ORDER BY seq LIMIT 1", []byte(key)).Scan(&h); err != nil {
			t.Fatalf("the line's head: %v", err)
		}
		return string(h)
	}
	release := func() {
		if ok, err := other.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
			t.Fatalf("Release(a): %v, %v", ok, err)
		}
	}
	var granted string
	if answered {
		// The Store sent the try before the leave: the line grants the holder, then the leave
		// arrives.
		granted = head()
		release()
		deliver()
	} else {
		deliver()
		a = <-again
		granted = head()
		release()
	}
	if a.err != nil || a.res.Granted {
		t.Fatalf("the shared holder's next try: %+v, %v; want refused, waiting", a.res, a.err)
	}
	w, err := s.Register(ctx, req("shared"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)

	snap, err := s.Inspect(ctx, key) // after the leave
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Leases) != 1 || snap.Leases[0].Holder != granted {
		t.Errorf("leases %+v; want the one the line granted %q, first in line when the key was released", snap.Leases, granted)
	}
	placed := false
	for _, w := range snap.Waiters {
		placed = placed || w.Holder == "shared"
	}
	if !placed && granted != "shared" {
		t.Errorf("the shared holder, told it waits, neither waits (%+v) nor holds (%+v)", snap.Waiters, snap.Leases)
	}
}

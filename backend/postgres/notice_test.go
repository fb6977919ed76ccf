package postgres_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
)

// TestWaiterTakesItsGrantFromTheNotice: the release that grants a waiter tells its Store the
// grant's fence, and the waiter, whose holder id is its own (Unshared), takes the grant without
// a statement: a handoff costs the waiter's Store only its refused try. The lease it takes has
// its fence, and a TTL counted from the refused try.
func TestWaiterTakesItsGrantFromTheNotice(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, url)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s, c := countedStore(t, url)
	before := c.n.Load() // setting up and listening
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true}
	w := enroll(t, s, req)
	refused := time.Now() // after the refused try was sent
	if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	<-w.C()
	taking := time.Now() // before the grant is taken
	res, err := s.Acquire(ctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("the woken waiter's try: %+v, %v; want granted", res, err)
	}
	if n := c.n.Load() - before; n != 1 {
		t.Errorf("the waiter's Store sent %d statements, want 1 (the refused try; the grant taken from its notice)", n)
	}
	if res.TTL <= 0 || res.TTL >= time.Minute-taking.Sub(refused) {
		t.Errorf("the taken grant's TTL %v, want less than the request's minute less the wait from the refused try to the take (%v)", res.TTL, taking.Sub(refused))
	}
	w.Close()
	snap, err := holder.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "w" || snap.Leases[0].Fence != res.Fence {
		t.Fatalf("after the take and the waiter's Close: %+v, %v; want w's lease of fence %d", snap, err, res.Fence)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "w", Fence: res.Fence}); err != nil || !ok {
		t.Fatalf("Release of the taken lease: %v, %v", ok, err)
	}
}

// TestGrantHeardBeforeRegisterIsTaken: a grant whose notice the Store heard before its waiter
// registered (the refused try's reply and the notice crossed) is taken as well, without a
// statement.
func TestGrantHeardBeforeRegisterIsTaken(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	s, c := countedStore(t, url)
	req := core.AcquireRequest{Key: uniqueKey(t), Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true}
	registerAfterGrantHeard(t, url, s, req)
	before := c.n.Load()
	if res, err := s.Acquire(context.Background(), req); err != nil || !res.Granted {
		t.Fatalf("the waiter's try: %+v, %v; want granted", res, err)
	}
	if n := c.n.Load() - before; n != 0 {
		t.Errorf("taking a grant heard before Register sent %d statements, want 0", n)
	}
}

// TestStaleNoticeIsNotTaken: a notice whose fence is not above the key's last fence at the
// waiter's refused try tells of a grant made before it (gone since, or it would not have been
// refused): the waiter is not woken by it, and its next try asks the database.
func TestStaleNoticeIsNotTaken(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, url)
	held, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, c := countedStore(t, url)
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true}
	w := enroll(t, s, req)
	drain(w.C())
	notify(t, url, s.Channel(), postgres.Notice(key, "w")+" "+strconv.FormatUint(held.Fence, 10))
	fresh := uniqueKey(t) // a notice after the stale one, to know it was delivered
	fw, err := s.Register(ctx, core.AcquireRequest{Key: fresh, Holder: "x", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	drain(fw.C()) // it starts woken: it made no try
	notify(t, url, s.Channel(), postgres.Notice(fresh, "x")+" 1")
	select {
	case <-fw.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the second notice was not heard")
	}
	select {
	case <-w.C():
		t.Error("a stale notice woke the waiter")
	default:
	}
	before := c.n.Load()
	if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
		t.Fatalf("the waiter's try after a stale notice: %+v, %v; want refused", res, err)
	}
	if n := c.n.Load() - before; n != 1 {
		t.Errorf("the try after a stale notice sent %d statements, want 1", n)
	}
}

// notify sends payload on channel from a connection of its own.
func notify(t *testing.T, url, channel, payload string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		t.Fatal(fmt.Errorf("notify: %w", err))
	}
}

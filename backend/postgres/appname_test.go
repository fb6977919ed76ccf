package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// waiterIsWokenAndGranted enrolls a waiter of s behind a lease of other's, releases that lease,
// and checks that the waiter, whose wakes s says are Reliable, is woken and then granted: the
// line took its place for a live one.
func waiterIsWokenAndGranted(t *testing.T, s, other *postgres.Store) {
	t.Helper()
	ctx := context.Background()
	key := uniqueKey(t)
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := other.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	w := enroll(t, s, req)
	if !w.Reliable() {
		t.Fatal("the waiter of a Store that listens is not Reliable")
	}
	drain(w.C())
	if ok, err := other.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not wake the waiter")
	}
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Errorf("the woken waiter's try: %+v, %v; want granted", res, err)
	}
}

// TestListenerBehindPgBouncerAddingItsHostIsAlive: PgBouncer's application_name_add_host appends
// the client's address to the listening session's application_name; the line still knows the
// session for the Store's, and grants its waiters.
func TestListenerBehindPgBouncerAddingItsHostIsAlive(t *testing.T) {
	testenv.SkipShort(t, "starts PgBouncer")
	t.Parallel()
	srv := server(t)
	bouncer := pgtest.StartPgBouncerMode(t, srv, "session", "application_name_add_host = 1")
	waiterIsWokenAndGranted(t, newStore(t, srv.URL, postgres.WithListenDSN(bouncer)), newStore(t, srv.URL))
}

// TestListenerDSNNamingItselfKeepsTheStoresName: a listening DSN that sets an application_name
// of its own (options=-c application_name=…) does not rename the listening session, which the
// line must know for the Store's.
func TestListenerDSNNamingItselfKeepsTheStoresName(t *testing.T) {
	t.Parallel()
	srv := server(t)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.RawQuery += "&options=-c%20application_name%3Dmine"
	waiterIsWokenAndGranted(t, newStore(t, srv.URL, postgres.WithListenDSN(u.String())), newStore(t, srv.URL))
}

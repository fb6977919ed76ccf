package postgres_test

// An adversarial review of the PostgreSQL driver (review18): each test turns a suspicion into a check.

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/core"
)

// TestGrantHeardBeforeRegisterWakes: the line grants a waiter, and its Store hears the grant,
// after the waiter's refused try returned but before it registers. The Waiter starts woken: the
// grant is not lost. (A watched key changed by a later transaction orders the two: notifications
// reach the listening connection in commit order, and the Store delivers them in turn.)
func TestGrantHeardBeforeRegisterWakes(t *testing.T) {
	url, key, marker := serverURL(t), uniqueKey(t), uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, url)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, url)
	wt, err := s.Watch(ctx, marker)
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Close()
	<-wt.C() // a Watch starts with a value
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
		t.Fatalf("the waiter's try: %+v, %v; want refused", res, err)
	}
	if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: marker, Holder: "m", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wt.C(): // the grant's notice was delivered before this
	case <-time.After(10 * time.Second):
		t.Fatal("the marker's change was not heard")
	}
	w, err := s.Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	select {
	case <-w.C():
	default:
		t.Fatal("a Waiter registered after its grant was heard did not start woken")
	}
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("the woken waiter's try: %+v, %v; want granted", res, err)
	}
}

// TestLiveWaitersAreNotPassedOver: the dead-waiter pass compares the listening backend's pid and
// start time as the waiter's try sent them. Whatever the pool's exec mode (the simple protocol
// sends the time as text) and session time zone, a live waiter is granted on the release, and
// woken, not passed over (a retry interval of an hour would show it: it would wait a minute).
func TestLiveWaitersAreNotPassedOver(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	for name, mode := range map[string]pgx.QueryExecMode{"simple": pgx.QueryExecModeSimpleProtocol, "exec": pgx.QueryExecModeExec,
		"cache": pgx.QueryExecModeCacheStatement} {
		t.Run(name, func(t *testing.T) {
			key := uniqueKey(t)
			s := storeOn(t, poolConfig(t, url, func(cfg *pgxpool.Config) {
				cfg.ConnConfig.DefaultQueryExecMode = mode
				cfg.ConnConfig.RuntimeParams["timezone"] = "Asia/Kathmandu" // +05:45
			}))
			holder := newStore(t, url)
			if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			w := enroll(t, s, req)
			if !w.Reliable() {
				t.Fatal("the waiter is not reliable")
			}
			holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"})
			snap, err := holder.Inspect(ctx, key)
			if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "w" {
				t.Fatalf("after the release: leases %+v, %v; want the live waiter granted", snap.Leases, err)
			}
			select {
			case <-w.C():
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter granted by the line was not woken")
			}
		})
	}
}

package postgres_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/faultproxy"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestDeadWaiterBehindSessionPoolIsPassedOver: a Store whose listening connection goes through
// PgBouncer in session mode dies; PgBouncer keeps its server session (same backend, same start)
// for its next client. The place its waiter left in the line must still count as dead: the
// release passes it over, so the key is not held for a TTL by a grant nobody will take, and the
// sweep removes it — even once the session serves the next Store's listener.
func TestDeadWaiterBehindSessionPoolIsPassedOver(t *testing.T) {
	testenv.SkipShort(t, "starts PgBouncer")
	t.Parallel()
	srv, own := server(t), ownSchema(t) // it sweeps
	bouncer, err := url.Parse(pgtest.StartPgBouncerMode(t, srv, "session"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.Start(t, bouncer.Host) // the dying Store's network
	listen := *bouncer
	listen.Host = proxy.Addr
	ctx := context.Background()
	live := newStore(t, own)
	dying := newStore(t, own, postgres.WithListenDSN(listen.String()))
	pool := newPool(t, own)

	key := uniqueKey(t)
	req := func(holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	}
	if res, err := live.Acquire(ctx, req("a")); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	enroll(t, dying, req("dead"))
	var placePid int32
	if err := pool.QueryRow(ctx, "SELECT pid FROM leasehold_waiters WHERE kh = sha256($1)", []byte(key)).Scan(&placePid); err != nil {
		t.Fatal(err)
	}
	proxy.Close() // the Store's process is gone: its connection to PgBouncer closes
	poll.Until(t, "PgBouncer to reset the dead listener's session", func() bool {
		var q string
		return pool.QueryRow(ctx, "SELECT query FROM pg_stat_activity WHERE pid = $1", placePid).Scan(&q) == nil && q == "DISCARD ALL"
	})
	// The next Store to listen through PgBouncer (a rolling deploy's new process) is given the
	// session the dead one left.
	newStore(t, own, postgres.WithListenDSN(bouncer.String()))
	var app string
	if err := pool.QueryRow(ctx, "SELECT application_name FROM pg_stat_activity WHERE pid = $1", placePid).Scan(&app); err != nil || !strings.HasPrefix(app, "leasehold listener ") {
		t.Logf("the dead Store's session went to no new listener (application_name %q, %v)", app, err)
	}
	sweep(t, live)
	var places int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM leasehold_waiters WHERE kh = sha256($1)", []byte(key)).Scan(&places); err != nil || places != 0 {
		t.Errorf("after a sweep: %d places, %v; want the dead waiter's removed", places, err)
	}
	if ok, err := live.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	if res, err := live.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "c", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		snap, _ := live.Inspect(ctx, key)
		t.Errorf("Acquire(c) after the release: %+v, %v; want granted (the store holds %+v)", res, err, snap.Leases)
	}
}

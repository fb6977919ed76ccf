package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestIdleWaitersSendNothing: eight waiters, each with a Store of its own and a retry interval of
// 250ms, wait behind a holder of a long lease; while they wait, none of their Stores sends a
// statement (the listening connection has sent its LISTEN before). Then the holder releases and
// each in turn is granted.
func TestIdleWaitersSendNothing(t *testing.T) {
	testenv.SkipShort(t, "its silence is watched for a second")
	t.Parallel() // its window is waited out
	url, key := serverURL(t), uniqueKey(t)
	holder, _ := primitives.NewMutex(newStore(t, url), key, primitives.WithTTL(time.Minute))
	ctx := context.Background()
	l, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var counters []*counter
	got := make(chan core.Lease, n)
	for range n {
		s, c := countedStore(t, url)
		counters = append(counters, c)
		// The first waiter waits while the later ones' Stores start (seconds each on a loaded
		// machine): its acquire timeout outlasts that.
		m, _ := primitives.NewMutex(s, key, primitives.WithTTL(time.Minute), primitives.WithRetryInterval(250*time.Millisecond),
			primitives.WithAcquireTimeout(2*time.Minute))
		go func() {
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	inspector := newStore(t, url)
	poll.Until(t, "every waiter in line", func() bool {
		snap, err := inspector.Inspect(ctx, key)
		return err == nil && len(snap.Waiters) == n
	})
	sent := func() (total int64) {
		for _, c := range counters {
			total += c.n.Load()
		}
		return total
	}
	before := sent()
	// A window of four retry intervals: a waiter that polled would have sent at least 24.
	window := time.NewTimer(time.Second)
	<-window.C
	if d := sent() - before; d != 0 {
		t.Errorf("idle waiters sent %d statements in 1s, want 0", d)
	}
	l.Release(ctx)
	for range n {
		select {
		case l := <-got:
			if l != nil {
				l.Release(ctx)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not granted the lock after the one before released it")
		}
	}
}

// TestListenerReconnects: the listening backend is terminated; waiters see their wakes become
// unreliable, then reliable again once the Store has listened anew, and a release after that
// still hands the lock over at once (a retry interval of an hour rules out polling).
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	admin := newPool(t, url)
	hs := newStore(t, url)
	holder, _ := primitives.NewMutex(hs, key, primitives.WithTTL(time.Minute))
	l, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws := newStore(t, url)
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	w := enroll(t, ws, req)
	if !w.Reliable() {
		t.Fatal("a waiter of a Store that listens is not reliable")
	}
	// The listeners of the test's Stores, named by the Stores' ids (the last 16 characters of
	// their channels): other tests' listeners are theirs.
	var listeners []string
	for _, s := range []*postgres.Store{hs, ws} {
		listeners = append(listeners, "leasehold listener "+s.Channel()[len(s.Channel())-16:])
	}
	var terminated int
	if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ANY($1)",
		listeners).Scan(&terminated); err != nil || terminated == 0 {
		t.Fatalf("terminate the listeners %q: %d, %v", listeners, terminated, err)
	}
	poll.Until(t, "the waiter to be told its wakes are unreliable", func() bool { return !w.Reliable() })
	poll.Until(t, "the Store to listen again", w.Reliable)
	// Woken on each change of reliability, the waiter tries again: its place now names the
	// new listening connection.
	drain(w.C())
	if res, err := ws.Acquire(ctx, req); err != nil || res.Granted {
		t.Fatalf("the waiter's try after the reconnection: %+v, %v; want refused", res, err)
	}
	l.Release(ctx)
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the release after the reconnection did not wake the waiter")
	}
	if res, err := ws.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("the woken waiter's try: %+v, %v; want granted", res, err)
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestGrantedWaiterSendsNoLeave: a waiter that took its grant owes the line nothing, so closing
// its waiter sends no statement: a handoff costs the waiter two (the refused try and the one
// that takes the grant).
func TestGrantedWaiterSendsNoLeave(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, url)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s, c := countedStore(t, url)
	before := c.n.Load() // setting up and listening
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	w := enroll(t, s, req)
	holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"})
	<-w.C()
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("the woken waiter's try: %+v, %v; want granted", res, err)
	}
	w.Close()
	s.Close() // waits for any leave
	if n := c.n.Load() - before; n != 2 {
		t.Errorf("the waiter's Store sent %d statements, want 2 (no leave after its grant)", n)
	}
}

// TestListenerOnAnotherDatabaseIsNotTrusted: a listening connection that reaches another
// database than the pool, on its server or another (a wrong WithListenDSN; LISTEN through a
// transaction pooler is the same: nothing is delivered) would hear no grant. It fails its self-check, so waiters know their wakes are
// unreliable, and poll, instead of waiting for wakes that cannot come.
func TestListenerOnAnotherDatabaseIsNotTrusted(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	testenv.SkipShort(t, "waits out the listener's 3s self-check")
	t.Parallel() // New waits out the listener's self-check
	url, key := serverURL(t), uniqueKey(t)
	s := newStore(t, url, postgres.WithListenDSN(ownDatabase(t, url)))
	ctx := context.Background()
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	w, err := s.Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Reliable() {
		t.Error("a waiter whose Store listens on another database says its wakes are reliable")
	}
}

// TestGrantHeardBeforeRegisterWakes: the line grants a waiter, and its Store hears the grant,
// after the waiter's refused try returned but before it registers. The waiter starts woken: the
// grant is not lost. (A watched key changed by a later transaction orders the two: notifications
// reach the listening connection in commit order, and the Store delivers them in turn.)
func TestGrantHeardBeforeRegisterWakes(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	s := newStore(t, url)
	req := core.AcquireRequest{Key: uniqueKey(t), Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	w := registerAfterGrantHeard(t, url, s, req)
	select {
	case <-w.C():
	default:
		t.Fatal("a waiter registered after its grant was heard did not start woken")
	}
	if res, err := s.Acquire(context.Background(), req); err != nil || !res.Granted {
		t.Fatalf("the woken waiter's try: %+v, %v; want granted", res, err)
	}
}

// registerAfterGrantHeard has s's waiter req refused on a key another Store holds, has the line
// grant it, and registers it once s has heard the grant (a watched key changed by a later
// transaction orders the two: notifications reach the listening connection in commit order, and
// the Store delivers them in turn). The waiter is closed when t ends.
func registerAfterGrantHeard(t *testing.T, url string, s *postgres.Store, req core.AcquireRequest) core.Wake {
	t.Helper()
	ctx, marker := context.Background(), uniqueKey(t)+":marker"
	holder := newStore(t, url)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: req.Key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wt, err := s.Watch(ctx, marker)
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Close()
	<-wt.C() // a Watch starts with a value
	if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
		t.Fatalf("the waiter's try: %+v, %v; want refused", res, err)
	}
	if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: "h"}); err != nil || !ok {
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
	t.Cleanup(w.Close)
	return w
}

// TestLiveWaitersAreNotPassedOver: the dead-waiter pass compares the listening backend's pid and
// start time as the waiter's try sent them. Whatever the pool's exec mode (the simple protocol
// sends the time as text) and session time zone, a live waiter is granted on the release, and
// woken, not passed over (a retry interval of an hour would show it: it would wait a minute).
func TestLiveWaitersAreNotPassedOver(t *testing.T) {
	t.Parallel()
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

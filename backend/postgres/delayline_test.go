package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// The line and the lock delay: the head waits a delay out, is told when it ends, and a grant the
// line makes carries its place's delay (see delay_test.go for expireByHand and endDelayByHand).

// TestLineWaitsOutTheDelay: the head of the line is not granted while a delay keeps its permits
// closed, neither by a release that frees others nor by a try: on a key of limit 2 with one
// permit in a's delay, b waits for 2; c's release of the other permit grants nobody, nor does a's
// try (in its own delay, it takes a place behind b), and once the delay ends b's next try is
// granted, then a, next in line, by b's release.
func TestLineWaitsOutTheDelay(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	req := func(holder string, permits int, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: permits, Limit: 2, TTL: time.Minute, Wait: wait, LockDelay: time.Minute}
	}
	for _, h := range []string{"a", "c"} {
		if res, err := s.Acquire(ctx, req(h, 1, 0)); err != nil || !res.Granted {
			t.Fatalf("Acquire(%s): %+v, %v", h, res, err)
		}
	}
	expireByHand(t, pool, key, "a")
	b := enroll(t, s, req("b", 2, time.Minute))
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "c"}); err != nil || !ok {
		t.Fatalf("Release(c): %v, %v", ok, err)
	}
	// With a permit free, a's try serves the line (b does not fit), then is refused.
	res, err := s.Acquire(ctx, req("a", 1, time.Minute))
	if err != nil || res.Granted || !delayLeft(res.RetryAfter) {
		t.Errorf("a's try in its own delay, behind b: %+v, %v; want refused until the delay ends", res, err)
	}
	ownAgain, err := s.Register(ctx, req("a", 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ownAgain.Close)
	if res, err := s.Acquire(ctx, req("b", 2, time.Minute)); err != nil || res.Granted || !delayLeft(res.RetryAfter) {
		t.Errorf("the head's try after c's release, in a's delay: %+v, %v; want refused until the delay ends", res, err)
	}
	if res, err := s.Acquire(ctx, req("n", 1, 0)); err != nil || res.Granted {
		t.Errorf("a newcomer's try with 1 permit free and b waiting: %+v, %v; want refused", res, err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 0 || len(snap.Delayed) != 1 || len(snap.Waiters) != 2 ||
		snap.Waiters[0].Holder != "b" || snap.Waiters[1].Holder != "a" {
		t.Fatalf("Inspect in a's delay: %+v, %v; want a delayed, b then a waiting", snap, err)
	}

	endDelayByHand(t, pool, key, "a")
	drain(b.C())
	if res, err := s.Acquire(ctx, req("b", 2, time.Minute)); err != nil || !res.Granted {
		t.Fatalf("the head's try once the delay ended: %+v, %v; want granted", res, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "b"}); err != nil || !ok {
		t.Fatalf("Release(b): %v, %v", ok, err)
	}
	select {
	case <-ownAgain.C():
	case <-time.After(10 * time.Second):
		t.Fatal("b's release did not grant a, next in line once its own delay ended")
	}
	if res, err := s.Acquire(ctx, req("a", 1, time.Minute)); err != nil || !res.Granted {
		t.Errorf("a's try after the line granted it: %+v, %v; want granted", res, err)
	}
}

// TestHolderInItsOwnDelayWaitsAtTheHead: a holder whose lease is in its lock delay, at the head
// of the line, is not granted by a release that frees a permit (its own expired lease is where a
// new one would go): the release succeeds, the holder keeps its place and newcomers stay behind
// it; once the delay ends its next try is granted.
func TestHolderInItsOwnDelayWaitsAtTheHead(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	req := func(holder string, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 2, TTL: time.Minute, Wait: wait, LockDelay: time.Minute}
	}
	for _, h := range []string{"a", "c"} {
		if res, err := s.Acquire(ctx, req(h, 0)); err != nil || !res.Granted {
			t.Fatalf("Acquire(%s): %+v, %v", h, res, err)
		}
	}
	expireByHand(t, pool, key, "a")
	enroll(t, s, req("a", time.Minute))
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "c"}); err != nil || !ok {
		t.Fatalf("Release(c), a at the head in its own delay: %v, %v", ok, err)
	}
	if res, err := s.Acquire(ctx, req("n", 0)); err != nil || res.Granted {
		t.Errorf("a newcomer's try with a permit free and a waiting: %+v, %v; want refused", res, err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 0 || len(snap.Delayed) != 1 || len(snap.Waiters) != 1 {
		t.Fatalf("Inspect: %+v, %v; want a delayed and waiting", snap, err)
	}
	endDelayByHand(t, pool, key, "a")
	if res, err := s.Acquire(ctx, req("a", time.Minute)); err != nil || !res.Granted {
		t.Errorf("a's try once its delay ended: %+v, %v; want granted", res, err)
	}
}

// TestLineGrantCarriesThePlacesDelay: the grant the line makes a place has the lock delay of the
// place's request: expiring unreleased, it keeps the key closed.
func TestLineGrantCarriesThePlacesDelay(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	req := func(holder string, wait, delay time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait, LockDelay: delay}
	}
	if res, err := s.Acquire(ctx, req("a", 0, 0)); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	w := enroll(t, s, req("b", time.Minute, time.Minute))
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("a's release did not grant b")
	}
	expireByHand(t, pool, key, "b") // before b takes the grant: it never will
	snap, err := s.Inspect(ctx, key)
	if err != nil || len(snap.Delayed) != 1 || snap.Delayed[0].Holder != "b" || !delayLeft(snap.Delayed[0].Left) {
		t.Fatalf("Inspect after the line's grant to b expired: %+v, %v; want b's delayed, about 59s left", snap, err)
	}
	// Giving the grant back, expired, ends no delay.
	w.Close()
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Delayed) != 1 {
		t.Errorf("Inspect after b gave back its expired grant: %+v, %v; want b's delayed still", snap, err)
	}
	if res, err := s.Acquire(ctx, req("c", 0, 0)); err != nil || res.Granted || !delayLeft(res.RetryAfter) {
		t.Errorf("Acquire(c) in b's delay: %+v, %v; want refused until it ends", res, err)
	}
}

// TestLineGrantTakenWithAnotherDelayTakesThatDelay: a waiter whose grant from the line came in
// its notice, asking for it with another lock delay than its place's, gets the lease with the
// delay it asks for now (its Acquire goes to the database, as a renewal, instead of taking the
// grant from the notice).
func TestLineGrantTakenWithAnotherDelayTakesThatDelay(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	req := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true}
	w := enroll(t, s, req)
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("a's release did not grant b")
	}
	req.LockDelay = time.Minute
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("b's Acquire with a delay after the line's grant: %+v, %v", res, err)
	}
	expireByHand(t, pool, key, "b")
	if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Delayed) != 1 {
		t.Errorf("Inspect after b's lease expired: %+v, %v; want it delayed, as b last asked", snap, err)
	}
}

// stamps is a pgx.QueryTracer that records when each statement but the sweep's was sent.
type stamps struct {
	mu   sync.Mutex
	sent []time.Time
}

func (s *stamps) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "sweep\"(") {
		s.mu.Lock()
		s.sent = append(s.sent, time.Now())
		s.mu.Unlock()
	}
	return ctx
}

// take returns the times recorded, and forgets them.
func (s *stamps) take() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent := s.sent
	s.sent = nil
	return sent
}

func (*stamps) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestWaiterIsGrantedWhenTheDelayEnds: a Mutex waiting behind a lease that expires unreleased
// with a lock delay is granted once the delay has ended, by the database's clock (its fence, the
// clock's microseconds at the grant, is past the lease's expiry plus its delay), and its Store
// sends nothing between its refused try and the delay's end: the refusal said when to try again.
func TestWaiterIsGrantedWhenTheDelayEnds(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	key := uniqueKey(t)
	const ttl, delay = time.Second, 1500 * time.Millisecond
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "stalled", Permits: 1, Limit: 1, TTL: ttl, LockDelay: delay}); err != nil || !res.Granted {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	var expires, delayUS int64
	if err := pool.QueryRow(ctx, "SELECT expires, delay FROM leasehold_leases WHERE kh = sha256($1)", []byte(key)).Scan(&expires, &delayUS); err != nil {
		t.Fatal(err)
	}
	ends := expires + delayUS
	tr := &stamps{}
	ws := storeOn(t, poolConfig(t, url, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr }))
	// A retry interval of an hour: the waiter tries again only when told to or woken.
	m, err := primitives.NewMutex(ws, key, primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Its listener up (until then a waiter polls), and the statements sent so far forgotten:
	// New's set-up, the listener's self-check, the leave of the probe's place and an Inspect.
	other := uniqueKey(t)
	poll.Until(t, "the waiter's Store to listen", func() bool {
		w, err := ws.Register(ctx, core.AcquireRequest{Key: other, Holder: "probe", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		return w.Reliable()
	})
	if _, err := ws.Inspect(ctx, other); err != nil { // waits for the probes' leaves
		t.Fatal(err)
	}
	tr.take()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := m.Acquire(actx)
	if err != nil {
		t.Fatalf("the waiter's Acquire: %v", err)
	}
	defer l.Release(ctx)
	if int64(l.Fence()) < ends {
		t.Errorf("the waiter was granted at %d µs, before the delay's end at %d µs", l.Fence(), ends)
	}
	sent := tr.take()
	if len(sent) < 1 || len(sent) > 3 {
		t.Fatalf("the waiter's Store sent %d statements, want its try, and one or two at the delay's end", len(sent))
	}
	for _, at := range sent[1:] {
		if at.Before(time.UnixMicro(ends)) {
			t.Errorf("the waiter's Store sent a statement %v before the delay's end (statements at %v)", time.UnixMicro(ends).Sub(at), sent)
		}
	}
}

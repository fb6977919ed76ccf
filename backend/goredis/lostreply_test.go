package goredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// lostReplySetup is a Store over a go-redis client whose ReadTimeout is short and whose retries
// are go-redis's defaults (MaxRetries 3), reaching a redis-server through a proxy that can drop
// the server's replies; the library is loaded and the pool warm, so that the next reply the
// server sends is that of the next call.
func lostReplySetup(t *testing.T) (*goredis.Store, *redistest.Proxy, string) {
	t.Helper()
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	client := redis.NewClient(&redis.Options{Addr: px.Addr, ReadTimeout: 200 * time.Millisecond, PoolSize: 1})
	t.Cleanup(func() { client.Close() })
	store, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.Inspect(t.Context(), "warm-up"); err != nil {
		t.Fatal(err)
	}
	return store, px, srv.Addr
}

// TestReleaseWhoseReplyIsLostIsNotReportedLost: a Release that ends the lease in time but whose
// reply never comes (dropped past the client's ReadTimeout) is not sent again by go-redis, whose
// second run would find nothing held and report the lease lost: the store reports the lost reply
// as an error (not a release of nothing), Lease.Release returns that error, not ErrLost, and
// the Release the caller makes again reports the lease released. The key was freed by the first.
func TestReleaseWhoseReplyIsLostIsNotReportedLost(t *testing.T) {
	store, px, _ := lostReplySetup(t)
	ctx := t.Context()

	// The store's own answer.
	req := core.AcquireRequest{Key: "store-release", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	res, err := store.Acquire(ctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	px.DropReplies(1)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	held, err := store.Release(rctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: res.Fence})
	cancel()
	if px.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1", px.Dropped())
	}
	if !held && err == nil {
		t.Error("Release whose reply was lost = false, nil: a release that went through reported as one of nothing")
	}
	if snap, err := store.Inspect(ctx, req.Key); err != nil || len(snap.Leases) != 0 {
		t.Fatalf("Inspect after the release = %+v, %v; want no lease (the release ran)", snap, err)
	}

	// Through a Mutex.
	m, err := primitives.NewMutex(store, "mutex-release", primitives.WithOnLost(func(_ core.Lease, err error) {
		t.Errorf("OnLost(%v) after a release that went through", err)
	}))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	px.DropReplies(1)
	rctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	err = l.Release(rctx)
	cancel()
	if px.Dropped() != 2 {
		t.Fatalf("%d replies dropped, want 2", px.Dropped())
	}
	if errors.Is(err, core.ErrLost) || l.Err() != nil {
		t.Fatalf("Release whose reply was lost = %v, Err = %v; want no loss: the lease was released in time", err, l.Err())
	}
	if err == nil {
		t.Fatal("Release whose reply was lost = nil; want the lost reply's error")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release again = %v; want nil (released by the first)", err)
	}
	l2, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after the release = %v; want the key free", err)
	}
	l2.Release(ctx)
}

// TestScriptCallWhoseReplyIsLostRunsOnce: whichever script a call runs (acquire, extend, release,
// a waiter's place and its leave), go-redis does not send it again when its reply is
// lost: the server runs it once, and the call reports an error, which the Store and the portable
// layer treat as a lost reply.
func TestScriptCallWhoseReplyIsLostRunsOnce(t *testing.T) {
	store, px, addr := lostReplySetup(t)
	ctx := t.Context()
	req := core.AcquireRequest{Key: "once", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	res, err := store.Acquire(ctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"acquire again", func(ctx context.Context) error { _, err := store.Acquire(ctx, req); return err }},
		{"extend", func(ctx context.Context) error {
			_, err := store.Extend(ctx, core.ExtendRequest{Key: req.Key, Holder: req.Holder, TTL: time.Minute})
			return err
		}},
		{"try that would wait", func(ctx context.Context) error {
			_, err := store.Acquire(ctx, core.AcquireRequest{Key: req.Key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
			return err
		}},
		{"release", func(ctx context.Context) error {
			_, err := store.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: res.Fence})
			return err
		}},
	}
	for i, c := range calls {
		before := redistest.ClientCommands(t, addr)
		px.DropReplies(1)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.call(cctx)
		cancel()
		if px.Dropped() != i+1 {
			t.Fatalf("%s: %d replies dropped in all, want %d", c.name, px.Dropped(), i+1)
		}
		if err == nil {
			t.Errorf("%s whose reply was lost = nil error", c.name)
		}
		// A failed try that would wait is followed by its leave, in the background: wait for it
		// (Inspect does), then count the calls the server ran.
		if _, err := store.Inspect(ctx, req.Key); err != nil {
			t.Fatal(err)
		}
		if ran := redistest.ClientCommands(t, addr) - before - 1; ran != 1 && !(c.name == "try that would wait" && ran == 2) {
			t.Errorf("%s whose reply was lost: the server ran %d script calls, want 1 (the call; and its leave for a try that would wait)", c.name, ran)
		}
	}
}

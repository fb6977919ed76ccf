package goredis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/rediscore"
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

// cutAfterRelease is a go-redis Dialer whose connections, once armed, cut the connection that
// carried the next release call when its reply comes: the reply is dropped with the connection,
// and the client reads EOF, after the server ran the call.
type cutAfterRelease struct {
	armed atomic.Bool
	cuts  atomic.Int32
}

func (d *cutAfterRelease) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, d: d}, nil
}

type cutConn struct {
	net.Conn
	d       *cutAfterRelease
	release atomic.Bool // a release call was written here while armed
}

func (c *cutConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(rediscore.FunctionName(2))) && c.d.armed.CompareAndSwap(true, false) {
		c.release.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *cutConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.release.Load() {
		c.d.cuts.Add(1)
		c.Conn.Close()
		return 0, io.EOF
	}
	return n, err
}

// TestReleaseCutAfterItRanIsNotSentAgain: a Release that the server runs, whose connection is
// then cut before the reply reaches the client (go-redis reads EOF, which it would retry), is not
// sent again: a second run would find nothing held and report the lease lost. The Store reports
// the lost reply as an error, and the key is free.
func TestReleaseCutAfterItRanIsNotSentAgain(t *testing.T) {
	srv := redistest.StartServer(t)
	d := &cutAfterRelease{}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: d.dial})
	t.Cleanup(func() { client.Close() })
	store, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := t.Context()
	req := core.AcquireRequest{Key: "cut-release", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	res, err := store.Acquire(ctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	before := fcalls(t, srv.Addr)
	d.armed.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	held, err := store.Release(rctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: res.Fence})
	cancel()
	if d.cuts.Load() != 1 {
		t.Fatalf("%d connections cut, want 1", d.cuts.Load())
	}
	if !held && err == nil {
		t.Fatal("Release whose connection was cut after it ran = false, nil: a release that went through reported as one of nothing (sent again)")
	}
	if err == nil {
		t.Fatalf("Release whose connection was cut = %v, nil; want the lost reply's error", held)
	}
	if ran := fcalls(t, srv.Addr) - before; ran != 1 {
		t.Errorf("the server ran %d FCALLs, want 1 (the Release, once)", ran)
	}
	if snap, err := store.Inspect(ctx, req.Key); err != nil || len(snap.Leases) != 0 {
		t.Fatalf("Inspect after the release = %+v, %v; want no lease (the release ran)", snap, err)
	}
}

// TestPipelinedCallsCutWithTheirConnectionGetTheirOwnReplies: many callers extend leases of
// different keys at once, so their calls go pipelined, while connections are cut after the
// server ran what they carried. No call is run twice (the server runs at most as many calls as
// were made), and each call that is answered gets its own reply: the value and fence of its own
// key's lease, never another call's.
func TestPipelinedCallsCutWithTheirConnectionGetTheirOwnReplies(t *testing.T) {
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	client := redis.NewClient(&redis.Options{Addr: px.Addr, ReadTimeout: time.Second})
	t.Cleanup(func() { client.Close() })
	store, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := t.Context()
	const keys, callers, calls = 8, 16, 25
	fences := make([]uint64, keys)
	for i := range keys {
		key := fmt.Sprintf("pipe-%d", i)
		res, err := store.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Value: key})
		if err != nil || !res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v", key, res, err)
		}
		fences[i] = res.Fence
	}
	before := fcalls(t, srv.Addr)
	px.LoseReplies(7, 0, true)
	var wg sync.WaitGroup
	var answered, failed atomic.Int32
	for c := range callers {
		wg.Go(func() {
			for j := range calls {
				i := (c + j) % keys
				key := fmt.Sprintf("pipe-%d", i)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				r, err := store.Extend(cctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute})
				cancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				answered.Add(1)
				if r.Value != key || r.Fence != fences[i] {
					t.Errorf("Extend(%s) = value %q, fence %d; want its own lease's: %q, %d", key, r.Value, r.Fence, key, fences[i])
				}
			}
		})
	}
	wg.Wait()
	px.LoseReplies(0, 0, false)
	if ran, made := fcalls(t, srv.Addr)-before, callers*calls; ran > made {
		t.Errorf("the server ran %d FCALLs for %d calls: some were sent again", ran, made)
	}
	if answered.Load() == 0 || failed.Load() == 0 {
		t.Fatalf("%d calls answered, %d failed; want both (replies cut, others through)", answered.Load(), failed.Load())
	}
	t.Logf("%d calls answered, %d failed", answered.Load(), failed.Load())
}

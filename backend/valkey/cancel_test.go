package valkey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// storeVia returns a Store over a fresh valkey-go client of addr with opt's settings.
func storeVia(t *testing.T, addr string, opt vk.ClientOption) *valkey.Store {
	t.Helper()
	_, s := clientAndStore(t, addr, opt)
	return s
}

// clientAndStore returns a fresh valkey-go client of addr with opt's settings (without its
// cache) and a Store over it, both closed when t ends.
func clientAndStore(t *testing.T, addr string, opt vk.ClientOption) (vk.Client, *valkey.Store) {
	t.Helper()
	c := newClient(t, addr, opt)
	return c, storeOver(t, c)
}

// newClient returns a fresh valkey-go client of addr with opt's settings, without its cache,
// closed when t ends.
func newClient(t *testing.T, addr string, opt vk.ClientOption) vk.Client {
	t.Helper()
	opt.InitAddress, opt.DisableCache = []string{addr}, true
	c, err := vk.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// storeOver returns a Store over c, closed when t ends (before a client made earlier in t, as
// cleanups run last first).
func storeOver(t *testing.T, c vk.Client) *valkey.Store {
	t.Helper()
	s, err := valkey.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestReleaseCanceledInFlightReportsWhatTheServerDid: a Release whose ctx (canceled, no
// deadline) ends while its script is on the wire returns what the reply says: released. Sent
// through valkey-go's background pipeline, it returned Canceled at once, the script still on its
// way to the server: whether the lock was released was left unknown.
func TestReleaseCanceledInFlightReportsWhatTheServerDid(t *testing.T) {
	testenv.SkipShort(t, "delays replies through a fault proxy")
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	s := storeVia(t, proxy.Addr, vk.ClientOption{})
	lost := make(chan error, 1)
	m, err := primitives.NewMutex(s, "canceled-release", primitives.WithTTL(time.Minute),
		primitives.WithOnLost(func(_ core.Lease, err error) { lost <- err }))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(200 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(50*time.Millisecond, cancel) // the call is on the wire by then: 200 ms each way
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release canceled in flight, the reply saying it released: %v, want nil", err)
	}
	proxy.SetLatency(0)
	if snap, err := m.Inspect(context.Background()); err != nil || len(snap.Leases) != 0 {
		t.Fatalf("after the release the lock holds %+v (%v), want nothing", snap.Leases, err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("a second Release: %v, want nil (the first released the lease)", err)
	}
	select {
	case err := <-lost:
		t.Errorf("OnLost ran for a lease that was released: %v", err)
	default:
	}
}

// TestCanceledCallIsNotSent: a call whose ctx (no deadline) ended before it was made fails with
// ctx's error and changes nothing on the server.
func TestCanceledCallIsNotSent(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := storeVia(t, srv.Addr, vk.ClientOption{})
	req := core.AcquireRequest{Key: "not-sent", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Acquire(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire on a canceled ctx: %v, want Canceled", err)
	}
	if snap, err := s.Inspect(context.Background(), "not-sent"); err != nil || len(snap.Leases) != 0 {
		t.Fatalf("after the canceled Acquire the key holds %+v (%v), want nothing", snap.Leases, err)
	}
	res, err := s.Acquire(context.Background(), req)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if _, err := s.Release(ctx, core.ReleaseRequest{Key: "not-sent", Holder: "h", Fence: res.Fence}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release on a canceled ctx: %v, want Canceled", err)
	}
	if snap, err := s.Inspect(context.Background(), "not-sent"); err != nil || len(snap.Leases) != 1 {
		t.Fatalf("after the canceled Release the key holds %+v (%v), want the lease", snap.Leases, err)
	}
}

// TestCanceledCallEndsByConnWriteTimeout: a call canceled while the server does not answer
// returns once valkey-go's ConnWriteTimeout ends it, with an error.
func TestCanceledCallEndsByConnWriteTimeout(t *testing.T) {
	testenv.SkipShort(t, "holds replies back in a fault proxy")
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	s := storeVia(t, proxy.Addr, vk.ClientOption{ConnWriteTimeout: 300 * time.Millisecond})
	req := core.AcquireRequest{Key: "unanswered", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	if _, err := s.Acquire(context.Background(), req); err != nil { // connection and library ready
		t.Fatal(err)
	}
	proxy.Hold(true)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() {
		_, err := s.Release(ctx, core.ReleaseRequest{Key: "unanswered", Holder: "h"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Release against a server that does not answer returned nil")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Release canceled against a server that does not answer has not returned in 30 s; ConnWriteTimeout is 300 ms")
	}
	proxy.Hold(false)
}

package goredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestReleaseCanceledInFlightIsNotReportedLost: a Release whose ctx is canceled while
// its call is on the wire, on a client that runs the call on the caller's goroutine (a ctx
// without a deadline on a client with timeouts; any ctx with ContextTimeoutEnabled), waits for
// the reply, as go-redis does; the server released the lease, and the reply says so: Release
// returns nil, the lease is not lost, and a second Release is a no-op rather than ErrLost.
func TestReleaseCanceledInFlightIsNotReportedLost(t *testing.T) {
	testenv.SkipShort(t, "delays replies through a fault proxy")
	for name, opt := range map[string]redis.Options{
		"default timeouts":      {},
		"ContextTimeoutEnabled": {ContextTimeoutEnabled: true},
	} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			proxy := redistest.StartProxy(t, srv.Addr)
			opt.Addr = proxy.Addr
			client := redis.NewClient(&opt)
			t.Cleanup(func() { client.Close() })
			s, err := goredis.New(client)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
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
			if err := l.Err(); err != nil {
				t.Errorf("Err after the release: %v, want nil", err)
			}
			select {
			case err := <-lost:
				t.Errorf("OnLost ran for a lease that was released: %v", err)
			default:
			}
		})
	}
}

package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/primitives"
)

// TestTryWithLostReplyLeavesNothingBehind: a waiting try reaches the server and takes a place
// in the line, but its reply is lost to a client-side error that is not the caller's ctx (here
// go-redis's ReadTimeout, with retries off). Store.Acquire left the place only when ctx ended,
// and the primitives give up on the error, so the place stays for the whole acquire timeout,
// owned by nobody. The holder's release then grants it the lock, untaken; its Store never
// subscribed (afterTry did not run), so the PUBLISH reaching nobody counts for nothing, and the
// next caller waits for the whole TTL of a lease nobody holds.
func TestTryWithLostReplyLeavesNothingBehind(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	ctx := context.Background()
	owner, _ := primitives.NewMutex(redisharness.Drivers["goredis"](t, srv.Addr), "lost-reply", primitives.WithTTL(time.Minute))
	l, err := owner.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	slow, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close(); c.Close() })
	gone, _ := primitives.NewMutex(slow, "lost-reply", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
	warm, _ := primitives.NewMutex(slow, "warm-up")
	if wl, err := warm.Acquire(ctx); err == nil {
		wl.Release(ctx) // connection and scripts ready: the try below is one command
	}
	proxy.SetLatency(300 * time.Millisecond)
	if _, err := gone.Acquire(ctx); err == nil {
		t.Fatal("Acquire through a read timeout succeeded")
	} else {
		t.Logf("the try failed: %v", err)
	}
	// The Store leaves for the try (on another connection, which may overtake it); the try,
	// arriving before or after, must leave no place nor lease behind.
	proxy.SetLatency(0)
	pollUntil(t, func() bool { return zcard(t, srv.Addr, "lost-reply", 3) == 1 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, _ := primitives.NewMutex(redisharness.Drivers["goredis"](t, srv.Addr), "lost-reply", primitives.WithTTL(time.Minute),
		primitives.WithAcquireTimeout(3*time.Second))
	start := time.Now()
	nl, err := next.Acquire(ctx)
	if err != nil {
		snap, _ := owner.Inspect(ctx)
		t.Fatalf("nobody waits and the holder released, yet the next caller was refused for %v: %v; leases %+v",
			time.Since(start).Round(time.Millisecond), err, snap.Leases)
	}
	nl.Release(ctx)
}

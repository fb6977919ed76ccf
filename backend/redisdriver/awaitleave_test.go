package redisdriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestAwaitLeaveEndsWithCtx guards Base.awaitLeave: a holder's next try waits for its pending
// leave of the key, but no longer than its ctx, even when the leave hangs (a partition); and
// Close returns once the hung leave gives up (leaveTimeout), not never.
func TestAwaitLeaveEndsWithCtx(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	owner := drivers["goredis"](t, srv.Addr)
	mustAcquire(t, owner, core.AcquireRequest{Key: "await", Holder: "owner", Permits: 1, Limit: 1, TTL: time.Minute}, true)
	req := core.AcquireRequest{Key: "await", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	mustAcquire(t, s, req, false)
	w, err := s.Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Hold(true)
	w.Close() // the leave goes out, and hangs
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Acquire(short, req)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 1500*time.Millisecond {
		t.Fatalf("next try with a 200ms ctx behind a hung leave: %v after %v", err, took)
	}
	start = time.Now()
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		proxy.Hold(false)
		t.Fatal("Close did not return within 10s of a hung leave")
	}
	proxy.Hold(false)
	t.Logf("Close returned after %v", time.Since(start).Round(time.Millisecond))
}

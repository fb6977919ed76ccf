package goredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// TestRingWaiterGetsTheLock: a Store over a go-redis Ring, which New takes, serves a waiter: the
// first refused try that waits opens the Store's subscription connection, which must not panic
// (a Ring subscribes only with a channel named), and the waiter gets the lock once it is
// released.
func TestRingWaiterGetsTheLock(t *testing.T) {
	t.Parallel()
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	c := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	defer c.Close()
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	m, _ := primitives.NewMutex(s, "ring", primitives.WithTTL(time.Minute), primitives.WithRetryInterval(20*time.Millisecond))
	l, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := m.Acquire(ctx)
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	// The waiter holds a place in the line before the release, so that it waits.
	poll.Until(t, "the waiter in line", func() bool {
		snap, err := s.Inspect(ctx, "ring")
		if err != nil {
			t.Fatal(err)
		}
		return len(snap.Waiters) == 1
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, "ring")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}

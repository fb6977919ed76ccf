package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

func TestSubscriptionSurvivesReconnect(t *testing.T) {
	testenv.SkipShort(t, "kills the server's pub/sub connections")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := watch(mk(t, srv.Addr))
			m, _ := primitives.NewMutex(s, "reconnect", primitives.WithTTL(time.Minute),
				primitives.WithAcquireTimeout(time.Minute), primitives.WithRetryInterval(20*time.Millisecond))
			l, err := m.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := acquireInBackground(t, m)
			poll.Until(t, "the waiter subscribed and confirmed", s.settled) // subscribed and confirmed: there is a subscription to kill
			s.unsettle()
			if _, err := redistest.Do(srv.Addr, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
				t.Fatal(err)
			}
			// The waiter polls while the subscription is down, then the driver reconnects and
			// resubscribes, and the waiter settles and falls silent again.
			poll.Until(t, "the waiter subscribed again", s.settled)
			// Silent: no command across a window of 15 of its retry intervals.
			poll.Until(t, "the waiter silent (resubscribed, no longer polling)", func() bool {
				before := commands(t, srv.Addr)
				time.Sleep(300 * time.Millisecond)
				return commands(t, srv.Addr) == before
			})
			l.Release(context.Background())
			select {
			case l2 := <-got:
				l2.Release(context.Background())
			case <-time.After(5 * time.Second):
				t.Fatal("the release did not reach the waiter through the renewed subscription")
			}
		})
	}
}

func TestFencesIncreaseAcrossRestartWithoutPersistence(t *testing.T) {
	testenv.SkipShort(t, "kills and restarts redis-server")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			var last uint64
			for i := range 3 {
				var res core.AcquireResult
				// After a restart the client's pooled connections fail once each as it reconnects.
				poll.For(t, fmt.Sprint("an acquire to succeed after ", i, " restarts"), func() (error, bool) {
					var err error
					res, err = s.Acquire(ctx, core.AcquireRequest{Key: "restart", Holder: fmt.Sprint("h", i), Permits: 1, Limit: 1, TTL: time.Minute})
					return err, err == nil
				})
				if !res.Granted {
					t.Fatalf("acquire after %d restarts: %+v", i, res)
				}
				if res.Fence <= last {
					t.Fatalf("fence %d after a restart that lost the data is not above %d", res.Fence, last)
				}
				last = res.Fence
				srv.Restart(t) // SIGKILL: no persistence, the counter is gone
			}
		})
	}
}

func TestCloseLeavesClientOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Register(context.Background(), core.AcquireRequest{Key: "k", Holder: "h", Permits: 1}) // opens the subscription
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-time.After(time.Second):
		t.Error("Close did not wake the Store's waiters")
	}
	w.Close()
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Inspect(context.Background(), "k"); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Inspect after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Register(context.Background(), core.AcquireRequest{Key: "k", Holder: "h", Permits: 1}); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Register after Close: %v, want ErrClosed", err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the caller's client after Store.Close: %v", err)
	}
}

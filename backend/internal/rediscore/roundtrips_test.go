package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestOneRoundTripPerOperation(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			req := core.AcquireRequest{Key: "rt", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Value: "host-a pid 4242"}
			// Warm up: connections, handshakes and script loads are paid once.
			s.Acquire(ctx, req)
			s.Extend(ctx, core.ExtendRequest{Key: "rt", Holder: "a", TTL: time.Minute})
			s.Inspect(ctx, "rt")
			s.Release(ctx, core.ReleaseRequest{Key: "rt", Holder: "a"})
			ops := []struct {
				name string
				do   func() error
			}{
				{"Acquire", func() error { _, err := s.Acquire(ctx, req); return err }},
				{"Acquire refused", func() error {
					_, err := s.Acquire(ctx, core.AcquireRequest{Key: "rt", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
					return err
				}},
				{"Extend", func() error {
					_, err := s.Extend(ctx, core.ExtendRequest{Key: "rt", Holder: "a", TTL: time.Minute})
					return err
				}},
				{"Inspect", func() error { _, err := s.Inspect(ctx, "rt"); return err }},
				{"Release", func() error { _, err := s.Release(ctx, core.ReleaseRequest{Key: "rt", Holder: "a"}); return err }},
			}
			for _, watched := range []string{"", " on a watched key"} {
				if watched != "" {
					// The scripts then PUBLISH inside the call: still one round trip each.
					w, err := s.Watch(ctx, "rt")
					if err != nil {
						t.Fatal(err)
					}
					defer w.Close()
					pollUntil(t, w.Reliable)
				}
				for _, op := range ops {
					before := commands(t, srv.Addr)
					if err := op.do(); err != nil {
						t.Fatalf("%s%s: %v", op.name, watched, err)
					}
					if n := commands(t, srv.Addr) - before; n != 1 {
						t.Errorf("%s%s sent %d commands, want 1", op.name, watched, n)
					}
				}
			}
		})
	}
}

func TestWaiterIsSilentBetweenNotifications(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := watch(mk(t, srv.Addr))
			m, _ := primitives.NewMutex(s, "quiet", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
			warm, _ := primitives.NewMutex(s, "warm-up")
			if l, err := warm.Acquire(context.Background()); err == nil {
				l.Release(context.Background()) // load the scripts: later counts are steady state
			}
			l, err := m.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := acquireInBackground(t, m)
			pollUntil(t, s.settled) // enrolled, subscribed, confirmed
			before := commands(t, srv.Addr)
			time.Sleep(time.Second) // ten default retry intervals... and the holder's refresh is 20s away
			if n := commands(t, srv.Addr) - before; n != 0 {
				t.Errorf("a waiter sent %d commands in 1s while its subscription was healthy, want 0", n)
			}
			before = commands(t, srv.Addr)
			l.Release(context.Background())
			l2 := <-got
			if n := commands(t, srv.Addr) - before; n != 1 {
				t.Errorf("one handoff cost %d commands, want 1: the release, which grants the waiter its lease (the waiter takes it from the message)", n)
			} else {
				t.Logf("one handoff: %d commands", n)
			}
			l2.Release(context.Background())
		})
	}
}

package rediscore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// BenchmarkStorePair: one Store Acquire and Release on a free key, per driver: two round trips.
func BenchmarkStorePair(b *testing.B) {
	srv := redistest.StartServer(b)
	for name, mk := range redisharness.Drivers {
		b.Run(name, func(b *testing.B) {
			s := mk(b, srv.Addr)
			ctx := context.Background()
			req := core.AcquireRequest{Key: "pair", Holder: "h", Permits: 1, Limit: 1, TTL: 10 * time.Second, Wait: 10 * time.Second}
			b.ReportAllocs()
			for b.Loop() {
				if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
					b.Fatal(res, err)
				}
				if _, err := s.Release(ctx, core.ReleaseRequest{Key: "pair", Holder: "h"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMutexPair: one Mutex Acquire and Release on a free key, per driver, with the
// primitives' defaults (a fresh holder id, a refreshed lease): two round trips.
func BenchmarkMutexPair(b *testing.B) {
	srv := redistest.StartServer(b)
	for name, mk := range redisharness.Drivers {
		b.Run(name, func(b *testing.B) {
			m, _ := primitives.NewMutex(mk(b, srv.Addr), "mutex")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := m.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHandoff: a lock passed between workers, each with its own Store and client (or, for
// "shared", two workers on one Store, which hands over from the release's reply); the release
// grants it to the next in line. It reports commands per pair.
func BenchmarkHandoff(b *testing.B) {
	srv := redistest.StartServer(b)
	for name, mk := range redisharness.Drivers {
		for _, workers := range []int{2, 16, -2} {
			label := fmt.Sprint(workers)
			if workers < 0 {
				workers, label = -workers, fmt.Sprint("shared-", -workers)
			}
			b.Run(fmt.Sprintf("%s/%s", name, label), func(b *testing.B) {
				var ms []*primitives.Mutex
				var shared redisharness.Store
				for range workers {
					s := shared
					if s == nil {
						s = mk(b, srv.Addr)
					}
					if label != fmt.Sprint(workers) {
						shared = s
					}
					m, _ := primitives.NewMutex(s, "handoff:"+label, primitives.WithAcquireTimeout(time.Minute))
					ms = append(ms, m)
				}
				left := make(chan struct{}, b.N)
				for range b.N {
					left <- struct{}{}
				}
				close(left)
				before := redistest.ClientCommands(b, srv.Addr)
				b.ResetTimer()
				done := make(chan struct{})
				for _, m := range ms {
					go func() {
						defer func() { done <- struct{}{} }()
						ctx := context.Background()
						for range left {
							l, err := m.Acquire(ctx)
							if err != nil {
								b.Error(err)
								return
							}
							l.Release(ctx)
						}
					}()
				}
				for range ms {
					<-done
				}
				b.StopTimer()
				b.ReportMetric(float64(redistest.ClientCommands(b, srv.Addr)-before)/float64(b.N), "cmds/pair")
			})
		}
	}
}

package redlock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// BenchmarkMutexPairs measures uncontended Mutex Acquire+Release pairs over Redlock of three
// local redis-servers, beside the same over one of them:
//
//	go test -run '^$' -bench MutexPairs -benchtime 3s ./redlock/
func BenchmarkMutexPairs(b *testing.B) {
	var stores []core.Store
	for range 3 {
		srv := redistest.StartServer(b)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		s, err := goredis.New(c)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(); c.Close() })
		stores = append(stores, s)
	}
	run := func(b *testing.B, store core.Store) {
		m, err := primitives.NewMutex(store, "bench")
		if err != nil {
			b.Fatal(err)
		}
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
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	}
	b.Run("single-redis", func(b *testing.B) { run(b, stores[0]) })
	b.Run("redlock-3-redis", func(b *testing.B) { run(b, mustNew(b, stores)) })
}

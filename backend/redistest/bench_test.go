package redistest_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// open returns a Store of the named driver on addr, and its closer.
func open(b *testing.B, driver, addr string) (core.Store, func()) {
	switch driver {
	case "goredis":
		c := redis.NewClient(&redis.Options{Addr: addr})
		s, err := goredis.New(c)
		if err != nil {
			b.Fatal(err)
		}
		return s, func() { s.Close(); c.Close() }
	default:
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		s, err := valkey.New(c)
		if err != nil {
			b.Fatal(err)
		}
		return s, func() { s.Close(); c.Close() }
	}
}

// BenchmarkDriverPairs measures uncontended Mutex Acquire+Release pairs on a local redis-server:
//
//	go test -run '^$' -bench Driver -benchtime 3s ./backend/redistest/
func BenchmarkDriverPairs(b *testing.B) {
	for _, driver := range []string{"goredis", "valkey"} {
		b.Run(driver, func(b *testing.B) {
			srv := redistest.StartServer(b)
			s, closeStore := open(b, driver, srv.Addr)
			defer closeStore()
			m, _ := primitives.NewMutex(s, "pairs")
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
		})
	}
}

// BenchmarkDriverHandoff16 has 16 workers, each with a client and Store of its own (separate
// processes in effect), pass a Mutex around on one key; it reports the handoff latency from a
// release to the next grant, and the client commands per handoff.
func BenchmarkDriverHandoff16(b *testing.B) {
	for _, driver := range []string{"goredis", "valkey"} {
		b.Run(driver, func(b *testing.B) {
			srv := redistest.StartServer(b)
			const workers = 16
			var mus []*primitives.Mutex
			for range workers {
				s, closeStore := open(b, driver, srv.Addr)
				defer closeStore()
				m, _ := primitives.NewMutex(s, "handoff", primitives.WithAcquireTimeout(time.Minute))
				mus = append(mus, m)
			}
			var (
				left       atomic.Int64
				releasedAt atomic.Int64
				mu         sync.Mutex
				lat        []time.Duration
				wg         sync.WaitGroup
			)
			left.Store(int64(b.N))
			before := redistest.ClientCommands(b, srv.Addr)
			b.ResetTimer()
			for _, m := range mus {
				wg.Go(func() {
					ctx := context.Background()
					for left.Add(-1) >= 0 {
						l, err := m.Acquire(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if r := releasedAt.Load(); r != 0 {
							d := time.Duration(time.Now().UnixNano() - r)
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
						}
						releasedAt.Store(time.Now().UnixNano())
						l.Release(ctx)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			cmds := redistest.ClientCommands(b, srv.Addr) - before
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns/handoff")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/handoff")
				b.ReportMetric(float64(cmds)/float64(len(lat)), "cmds/handoff")
			}
		})
	}
}

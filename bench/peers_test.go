package bench

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylock"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// locker is one library's lock on one key for one process: lock waits, unlock releases.
type locker struct {
	lock   func(ctx context.Context) (unlock func(), err error)
	closer func()
}

// lib makes a locker on the servers at addrs (the first, or all of them for Redlock).
type lib func(b *testing.B, addrs []string, key string) locker

func goredisClient(addr string) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) }

func leaseholdMutex(b *testing.B, store core.Store, key string, closer func()) locker {
	m, err := primitives.NewMutex(store, key, primitives.WithAcquireTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	return locker{lock: func(ctx context.Context) (func(), error) {
		l, err := m.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return func() { l.Release(ctx) }, nil
	}, closer: closer}
}

var libs = map[string]lib{
	"leasehold-goredis": func(b *testing.B, addrs []string, key string) locker {
		c := goredisClient(addrs[0])
		s, _ := goredis.New(c)
		return leaseholdMutex(b, s, key, func() { s.Close(); c.Close() })
	},
	"leasehold-valkey": func(b *testing.B, addrs []string, key string) locker {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: addrs[:1], DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		s, _ := valkey.New(c)
		return leaseholdMutex(b, s, key, func() { s.Close(); c.Close() })
	},
	"redsync": func(b *testing.B, addrs []string, key string) locker {
		c := goredisClient(addrs[0])
		m := redsync.New(rsgoredis.NewPool(c)).NewMutex(key, redsync.WithTries(1<<20), redsync.WithRetryDelay(time.Millisecond))
		return locker{lock: func(ctx context.Context) (func(), error) {
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func() { m.UnlockContext(ctx) }, nil
		}, closer: func() { c.Close() }}
	},
	"bsm-redislock": func(b *testing.B, addrs []string, key string) locker {
		c := goredisClient(addrs[0])
		rl := redislock.New(c)
		opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
		return locker{lock: func(ctx context.Context) (func(), error) {
			l, err := rl.Obtain(ctx, key, 10*time.Second, opt)
			if err != nil {
				return nil, err
			}
			return func() { l.Release(ctx) }, nil
		}, closer: func() { c.Close() }}
	},
	"valkeylock": func(b *testing.B, addrs []string, key string) locker {
		l, err := valkeylock.NewLocker(valkeylock.LockerOption{ClientOption: vk.ClientOption{InitAddress: addrs[:1]}, KeyMajority: 1})
		if err != nil {
			b.Fatal(err)
		}
		return locker{lock: func(ctx context.Context) (func(), error) {
			_, cancel, err := l.WithContext(ctx, key)
			if err != nil {
				return nil, err
			}
			return cancel, nil
		}, closer: l.Close}
	},
}

// BenchmarkUncontended: one worker's Acquire+Release pairs per library.
func BenchmarkUncontended(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, name := range slices.Sorted(maps.Keys(libs)) {
		b.Run(name, func(b *testing.B) {
			l := libs[name](b, []string{srv.Addr}, "uncontended:"+name)
			defer l.closer()
			ctx := context.Background()
			for b.Loop() {
				unlock, err := l.lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				unlock()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		})
	}
}

// BenchmarkHandoff16: 16 workers, each a client of its own, pass one lock around; it reports
// handoff latency from release to the next grant and client commands per handoff.
func BenchmarkHandoff16(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, name := range slices.Sorted(maps.Keys(libs)) {
		if name == "valkeylock" {
			// With 16 lockers on one key it did not finish a 1s run here (over 2 minutes);
			// left out until that is understood.
			continue
		}
		b.Run(name, func(b *testing.B) {
			const workers = 16
			var ls []locker
			for range workers {
				l := libs[name](b, []string{srv.Addr}, "handoff:"+name)
				defer l.closer()
				ls = append(ls, l)
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
			for _, l := range ls {
				wg.Go(func() {
					ctx := context.Background()
					for left.Add(-1) >= 0 {
						unlock, err := l.lock(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if r := releasedAt.Load(); r != 0 {
							mu.Lock()
							lat = append(lat, time.Duration(time.Now().UnixNano()-r))
							mu.Unlock()
						}
						releasedAt.Store(time.Now().UnixNano())
						unlock()
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			report(b, lat, redistest.ClientCommands(b, srv.Addr)-before)
		})
	}
}

// BenchmarkRedlock3: Mutex pairs over Redlock of three servers, Leasehold beside redsync.
func BenchmarkRedlock3(b *testing.B) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartServer(b).Addr)
	}
	ctx := context.Background()
	b.Run("leasehold", func(b *testing.B) {
		var stores []core.Store
		for _, a := range addrs {
			c := goredisClient(a)
			s, _ := goredis.New(c)
			defer func() { s.Close(); c.Close() }()
			stores = append(stores, s)
		}
		rl, err := redlock.New(stores)
		if err != nil {
			b.Fatal(err)
		}
		m, _ := primitives.NewMutex(rl, "redlock")
		for b.Loop() {
			l, err := m.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			l.Release(ctx)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	})
	b.Run("redsync", func(b *testing.B) {
		var pools []redsyncredis.Pool
		for _, a := range addrs {
			c := goredisClient(a)
			defer c.Close()
			pools = append(pools, rsgoredis.NewPool(c))
		}
		m := redsync.New(pools...).NewMutex("redlock-redsync")
		for b.Loop() {
			if err := m.LockContext(ctx); err != nil {
				b.Fatal(err)
			}
			m.UnlockContext(ctx)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	})
}

func report(b *testing.B, lat []time.Duration, cmds int) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns/handoff")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/handoff")
	b.ReportMetric(float64(cmds)/float64(len(lat)), "cmds/handoff")
}

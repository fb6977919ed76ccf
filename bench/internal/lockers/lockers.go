// Package lockers builds the lock libraries the benchmarks compare — Leasehold over each of its
// Redis drivers, redsync, bsm/redislock and valkey-go's valkeylock — in the configurations
// measured, behind one small Locker type. Each Locker has client connections of its own, and
// every connection is dialled through a wire.Counter so the commands it sends can be counted.
package lockers

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylock"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"

	"github.com/leasehold/leasehold/bench/internal/wire"
)

// Locker is one process's handle on one lock, over client connections of its own.
type Locker struct {
	// Lock waits until it holds the lock, the library gives up, or ctx ends, and returns the
	// function that releases the lock.
	Lock func(ctx context.Context) (unlock func() error, err error)
	// Close closes the Locker's clients.
	Close func()
}

// Lib is one library in one configuration.
type Lib struct {
	// Name is how flags and benchmark names refer to it.
	Name string
	// Label is its row heading in the report.
	Label string
	// Peer is true for the libraries Leasehold is measured against.
	Peer bool
	// Config says how it is set up, for the report.
	Config string
	// Caveat explains behaviour of this configuration that the figures show, for the report.
	Caveat string
	// Hidden libraries are left out unless asked for by name.
	Hidden bool
	// Mutex returns a Locker on key at the server addr.
	Mutex func(addr, key string, c *wire.Counter) (Locker, error)
	// Semaphore returns a Locker taking one of limit permits on key at addr; it is nil when
	// the library has no semaphore.
	Semaphore func(addr, key string, limit int, c *wire.Counter) (Locker, error)
	// Redlock returns a Locker on key held by a quorum of the servers at addrs; it is nil when
	// the library has no Redlock over independent servers.
	Redlock func(addrs []string, key string, c *wire.Counter) (Locker, error)
}

// All returns every library, Leasehold first, hidden ones included.
func All() []Lib {
	return slices.Concat(leaseholdLibs(), redisPeerLibs(), valkeylockLibs())
}

// leaseholdLibs are Leasehold over each of its Redis drivers.
func leaseholdLibs() []Lib {
	return []Lib{
		{
			Name: "leasehold-goredis", Label: "leasehold-goredis",
			Config: "primitives defaults over backend/goredis; a release grants the lock to the next in line and tells its Store by pub/sub",
			Mutex:  leaseholdGoredis(mutex),
			Semaphore: func(addr, key string, limit int, c *wire.Counter) (Locker, error) {
				return leaseholdGoredis(semaphore(limit))(addr, key, c)
			},
			Redlock: leaseholdRedlock,
		},
		{
			Name: "leasehold-valkey", Label: "leasehold-valkey",
			Config: "primitives defaults over backend/valkey (valkey-go, DisableCache); a release grants the lock to the next in line and tells its Store by pub/sub",
			Mutex:  leaseholdValkey(mutex),
			Semaphore: func(addr, key string, limit int, c *wire.Counter) (Locker, error) {
				return leaseholdValkey(semaphore(limit))(addr, key, c)
			},
		},
	}
}

// redisPeerLibs are redsync and bsm/redislock, at their defaults and tuned.
func redisPeerLibs() []Lib {
	return []Lib{
		{
			Name: "redsync", Label: "redsync (defaults)", Peer: true,
			Config:  "defaults: 32 tries, 50–250 ms random retry delay, 8 s expiry",
			Mutex:   redsyncMutex(),
			Redlock: redsyncRedlock(),
		},
		{
			Name: "redsync-tuned", Label: "redsync (tuned)", Peer: true,
			Config:  "WithRetryDelay(1ms), WithTries(1<<20)",
			Mutex:   redsyncMutex(redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(1<<20)),
			Redlock: redsyncRedlock(redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(1<<20)),
		},
		{
			Name: "redislock", Label: "bsm/redislock (defaults)", Peer: true,
			Config: "its default RetryStrategy is NoRetry (one attempt, then ErrNotObtained), so waiting uses " +
				"LinearBackoff(100ms), the interval of its own retry example; TTL 10 s",
			Mutex: redislockMutex(redislock.LinearBackoff(100 * time.Millisecond)),
		},
		{
			Name: "redislock-tuned", Label: "bsm/redislock (tuned)", Peer: true,
			Config: "LinearBackoff(1ms); TTL 10 s",
			Mutex:  redislockMutex(redislock.LinearBackoff(time.Millisecond)),
		},
	}
}

// valkeylockLibs are valkey-go's valkeylock in the configurations its README and options offer.
func valkeylockLibs() []Lib {
	return []Lib{
		{
			Name: "valkeylock", Label: "valkeylock (defaults)", Peer: true,
			Config: "defaults: KeyMajority 2 (3 keys, all on the one server), client-side caching wakes waiters, " +
				"TryNextAfter 20 ms, KeyValidity 5 s",
			Caveat: "without NoLoopTracking, a holder that gets one invalidation for a key it holds checks it with " +
				"an extend script (GET, PEXPIREAT, GET), whose PEXPIREAT invalidates the key for the holder itself: " +
				"it extends back to back until it releases. The first timed extend of any lock held past " +
				"ExtendInterval (2.5 s) starts it, and so does a stray invalidation: here the previous lock's third " +
				"key, tried only after that lock was released, skips its SET but runs its clean-up delete script, " +
				"whose GET leaves the client tracking the key, so the next lock's own SET on it comes back as an " +
				"invalidation",
			Mutex: ValkeylockMutex(valkeylock.LockerOption{}),
		},
		{
			Name: "valkeylock-noloop", Label: "valkeylock (tuned: NoLoopTracking)", Peer: true,
			Config: "defaults plus NoLoopTracking (the README's switch \"to have better performance\", servers >= 7.0.5): " +
				"no invalidations for a client's own writes, so no extend loop",
			Mutex: ValkeylockMutex(valkeylock.LockerOption{NoLoopTracking: true}),
		},
		{
			Name: "valkeylock-poll", Label: "valkeylock (tuned: KeyMajority 1, polling 1 ms)", Peer: true,
			Config: "KeyMajority 1, DisableCache, TryNextAfter 1 ms: one key, waiters retry every 1 ms",
			Caveat: "DisableCache is what makes KeyMajority 1 safe to wait on: with client-side caching it strands " +
				"waiters (run -only valkeylock-km1); without it WithContext retries every TryNextAfter, which also " +
				"bounds each acquire command's round trip",
			Mutex: ValkeylockMutex(valkeylock.LockerOption{KeyMajority: 1, TryNextAfter: time.Millisecond,
				ClientOption: vk.ClientOption{DisableCache: true}}),
		},
		{
			Name: "valkeylock-km1", Label: "valkeylock (README: KeyMajority 1, NoLoopTracking)", Peer: true, Hidden: true,
			Config: "the README's single-instance setup: KeyMajority 1, NoLoopTracking, client-side caching",
			Caveat: "waiters can miss their wake-up for good: in Locker.try the goroutine that ends a failed " +
				"attempt (monitoring) is started before try counts the failure, may read a failure count of 0, " +
				"take the success path and delete the name's gate; later invalidations find no gate, and " +
				"WithContext, which with client-side caching waits for the gate alone, waits until its ctx ends. " +
				"With KeyMajority 2 the monitoring goroutine that finishes last is started after the failures " +
				"are counted (or first waits for a round trip), which is why the defaults do not strand",
			Mutex: ValkeylockMutex(valkeylock.LockerOption{KeyMajority: 1, NoLoopTracking: true}),
		},
	}
}

// Default returns the libraries that are not hidden.
func Default() []Lib {
	var ls []Lib
	for _, l := range All() {
		if !l.Hidden {
			ls = append(ls, l)
		}
	}
	return ls
}

func goredisClient(addr string, c *wire.Counter) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Dialer: c.Dial})
}

func valkeyClient(addr string, c *wire.Counter) (vk.Client, error) {
	return vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true, DialCtxFn: c.DialValkey})
}

// primitive makes the acquire function of a Leasehold primitive on key over store.
type primitive func(store core.Store, key string) (func(ctx context.Context) (core.Lease, error), error)

func mutex(store core.Store, key string) (func(ctx context.Context) (core.Lease, error), error) {
	m, err := primitives.NewMutex(store, key)
	if err != nil {
		return nil, err
	}
	return m.Acquire, nil
}

func semaphore(limit int) primitive {
	return func(store core.Store, key string) (func(ctx context.Context) (core.Lease, error), error) {
		s, err := primitives.NewSemaphore(store, key, limit)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (core.Lease, error) { return s.Acquire(ctx, 1) }, nil
	}
}

func leaseholdLocker(store core.Store, key string, p primitive, closer func()) (Locker, error) {
	acquire, err := p(store, key)
	if err != nil {
		closer()
		return Locker{}, err
	}
	return Locker{
		Lock: func(ctx context.Context) (func() error, error) {
			l, err := acquire(ctx)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(context.Background()) }, nil
		},
		Close: closer,
	}, nil
}

func leaseholdGoredis(p primitive) func(addr, key string, c *wire.Counter) (Locker, error) {
	return func(addr, key string, c *wire.Counter) (Locker, error) {
		client := goredisClient(addr, c)
		s, err := goredis.New(client)
		if err != nil {
			client.Close()
			return Locker{}, err
		}
		return leaseholdLocker(s, key, p, func() { s.Close(); client.Close() })
	}
}

func leaseholdValkey(p primitive) func(addr, key string, c *wire.Counter) (Locker, error) {
	return func(addr, key string, c *wire.Counter) (Locker, error) {
		client, err := valkeyClient(addr, c)
		if err != nil {
			return Locker{}, err
		}
		s, err := valkey.New(client)
		if err != nil {
			client.Close()
			return Locker{}, err
		}
		return leaseholdLocker(s, key, p, func() { s.Close(); client.Close() })
	}
}

func leaseholdRedlock(addrs []string, key string, c *wire.Counter) (Locker, error) {
	var stores []core.Store
	var closers []func()
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	for _, a := range addrs {
		client := goredisClient(a, c)
		s, err := goredis.New(client)
		if err != nil {
			client.Close()
			closeAll()
			return Locker{}, err
		}
		stores = append(stores, s)
		closers = append(closers, func() { s.Close(); client.Close() })
	}
	rl, err := redlock.New(stores)
	if err != nil {
		closeAll()
		return Locker{}, err
	}
	return leaseholdLocker(rl, key, mutex, closeAll)
}

func redsyncLocker(m *redsync.Mutex, closer func()) Locker {
	return Locker{
		Lock: func(ctx context.Context) (func() error, error) {
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func() error {
				if ok, err := m.UnlockContext(context.Background()); !ok {
					return errors.Join(errors.New("redsync: unlock failed"), err)
				}
				return nil
			}, nil
		},
		Close: closer,
	}
}

func redsyncMutex(opts ...redsync.Option) func(addr, key string, c *wire.Counter) (Locker, error) {
	return func(addr, key string, c *wire.Counter) (Locker, error) {
		client := goredisClient(addr, c)
		m := redsync.New(rsgoredis.NewPool(client)).NewMutex(key, opts...)
		return redsyncLocker(m, func() { client.Close() }), nil
	}
}

func redsyncRedlock(opts ...redsync.Option) func(addrs []string, key string, c *wire.Counter) (Locker, error) {
	return func(addrs []string, key string, c *wire.Counter) (Locker, error) {
		var pools []redsyncredis.Pool
		var clients []*redis.Client
		for _, a := range addrs {
			client := goredisClient(a, c)
			clients = append(clients, client)
			pools = append(pools, rsgoredis.NewPool(client))
		}
		m := redsync.New(pools...).NewMutex(key, opts...)
		return redsyncLocker(m, func() {
			for _, client := range clients {
				client.Close()
			}
		}), nil
	}
}

func redislockMutex(retry redislock.RetryStrategy) func(addr, key string, c *wire.Counter) (Locker, error) {
	return func(addr, key string, c *wire.Counter) (Locker, error) {
		client := goredisClient(addr, c)
		rl := redislock.New(client)
		opt := &redislock.Options{RetryStrategy: retry}
		return Locker{
			Lock: func(ctx context.Context) (func() error, error) {
				l, err := rl.Obtain(ctx, key, 10*time.Second, opt)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(context.Background()) }, nil
			},
			Close: func() { client.Close() },
		}, nil
	}
}

// ValkeylockMutex returns a valkeylock Mutex maker for opt, its address and dialer filled in:
// each call makes a Locker of its own (so a client of its own). WithContext's lock ctx derives
// from the ctx passed to Lock, so a deadline there would also cut the lock short; callers bound
// the wait by cancelling instead.
func ValkeylockMutex(opt valkeylock.LockerOption) func(addr, key string, c *wire.Counter) (Locker, error) {
	return func(addr, key string, c *wire.Counter) (Locker, error) {
		opt.ClientOption.InitAddress = []string{addr}
		opt.ClientOption.DialCtxFn = c.DialValkey
		l, err := valkeylock.NewLocker(opt)
		if err != nil {
			return Locker{}, err
		}
		return Locker{
			Lock: func(ctx context.Context) (func() error, error) {
				_, cancel, err := l.WithContext(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { cancel(); return nil }, nil
			},
			Close: l.Close,
		}, nil
	}
}

package lockers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

// Shared is one library in the floor comparison: the uncontended lock/unlock pair, every
// worker's lock on one client shared by all of them (one client per server for Redlock), as an
// application uses one client. Unlike a Lib's, its Lockers own no connections.
type Shared struct {
	// Name is how flags refer to it.
	Name string
	// Label is its row heading in the report.
	Label string
	// Config says how it is set up, for the report.
	Config string
	// Base marks the row the others of its group are measured against: bsm/redislock on one
	// server, redsync on the Redlock servers.
	Base bool
	// Redlock is true for a library measured on the three Redlock servers.
	Redlock bool
	// Open connects to addrs (one server, or the three Redlock servers) and returns a maker of
	// Lockers, each on a key of its own over the shared client, and the function that closes
	// the client. A Locker's Close does nothing.
	Open func(addrs []string) (newLocker func(key string) (Locker, error), closeClient func(), err error)
}

// sharedTTL is the lease time of every Shared library that takes one.
const sharedTTL = 10 * time.Second

// FloorLibs returns the libraries of the floor comparison: the bare SET NX pair, bsm/redislock,
// a minimal fenced lease with server time, Leasehold over each Redis driver, and Redlock(3) by
// Leasehold and by redsync.
func FloorLibs() []Shared {
	return []Shared{
		{
			Name: "setnx", Label: "SET NX PX + EVALSHA compare-and-delete",
			Config: "go-redis: SET key token NX PX 10000, then EVALSHA of GET-compare-DEL; the token is a random " +
				"per-process prefix and a counter",
			Open: openSetNX,
		},
		{
			Name: "redislock", Label: "bsm/redislock Obtain + Release", Base: true,
			Config: "redislock.New on the shared client, Obtain with its default NoRetry, TTL 10 s, then Release",
			Open:   openRedislock,
		},
		{
			Name: "fenced", Label: "minimal fenced lease, server time (FCALL)",
			Config: "a Redis Functions library loaded once (FUNCTION LOAD REPLACE); acquire: TIME, HMGET holder " +
				"fence, refuse if held, fence = max(last + 1, server time in µs), HSET holder fence expiry, " +
				"PEXPIRE 10000; release: HGET holder, DEL if it is the caller's",
			Open: openFenced,
		},
		{
			Name: "leasehold-goredis", Label: "Leasehold Mutex Acquire + Release (go-redis)",
			Config: "primitives defaults; one goredis Store on the shared client, a Mutex per key",
			Open:   openLeaseholdGoredis,
		},
		{
			Name: "leasehold-valkey", Label: "Leasehold Mutex Acquire + Release (valkey-go)",
			Config: "primitives defaults; one valkey Store on one shared valkey-go client (DisableCache), a Mutex per key",
			Open:   openLeaseholdValkey,
		},
		{
			Name: "redsync", Label: "redsync Redlock(3)", Base: true, Redlock: true,
			Config: "defaults (8 s expiry) over three servers, one go-redis client each, a Mutex per key",
			Open:   openRedsync,
		},
		{
			Name: "leasehold-redlock", Label: "Leasehold Redlock(3) Mutex", Redlock: true,
			Config: "primitives defaults over redlock.New of three goredis Stores, one go-redis client each, a Mutex per key",
			Open:   openLeaseholdRedlock,
		},
	}
}

// errNotObtained is a refused acquire of a Shared library that refuses rather than waits: on a
// key of the worker's own, it means the last release did not free it.
var errNotObtained = errors.New("not obtained: the key is held")

// errNotHeld is a release that found the lock held by another token, or not at all.
var errNotHeld = errors.New("release: lock not held")

// tokens makes unique lock tokens: a random per-process prefix and a counter.
type tokens struct {
	prefix string
	n      atomic.Uint64
}

func newTokens() *tokens {
	b := make([]byte, 12)
	rand.Read(b)
	return &tokens{prefix: base64.RawURLEncoding.EncodeToString(b) + ":"}
}

func (t *tokens) next() string { return t.prefix + strconv.FormatUint(t.n.Add(1), 36) }

func noClose() {}

var compareAndDelete = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func openSetNX(addrs []string) (func(string) (Locker, error), func(), error) {
	client := redis.NewClient(&redis.Options{Addr: addrs[0]})
	ttl := strconv.FormatInt(sharedTTL.Milliseconds(), 10)
	toks := newTokens()
	return func(key string) (Locker, error) {
		return Locker{
			Lock: func(ctx context.Context) (func() error, error) {
				token := toks.next()
				if err := client.Do(ctx, "set", key, token, "nx", "px", ttl).Err(); err != nil {
					if errors.Is(err, redis.Nil) {
						return nil, errNotObtained
					}
					return nil, err
				}
				return func() error {
					return deletedOne(compareAndDelete.Run(context.Background(), client, []string{key}, token).Int())
				}, nil
			},
			Close: noClose,
		}, nil
	}, func() { client.Close() }, nil
}

func openRedislock(addrs []string) (func(string) (Locker, error), func(), error) {
	client := redis.NewClient(&redis.Options{Addr: addrs[0]})
	rl := redislock.New(client)
	return func(key string) (Locker, error) {
		return Locker{
			Lock: func(ctx context.Context) (func() error, error) {
				l, err := rl.Obtain(ctx, key, sharedTTL, nil)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(context.Background()) }, nil
			},
			Close: noClose,
		}, nil
	}, func() { client.Close() }, nil
}

// fencedLibrary is the minimal fenced lease: a holder, a fence from the server's clock that
// never goes below the key's last one, and an expiry. A release deletes the key, so the next
// acquire's fence is its server time in µs: above the deleted one's unless the server's clock
// steps back.
const fencedLibrary = `#!lua name=peerbench_fenced
redis.register_function('peerbench_acquire', function(keys, args)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local lease = redis.call('HMGET', keys[1], 'holder', 'fence')
  if lease[1] then
    return false
  end
  local fence = now
  local last = tonumber(lease[2])
  if last and last >= fence then
    fence = last + 1
  end
  local ttl = tonumber(args[2])
  redis.call('HSET', keys[1], 'holder', args[1], 'fence', fence, 'expiry', now + ttl * 1000)
  redis.call('PEXPIRE', keys[1], ttl)
  return fence
end)
redis.register_function('peerbench_release', function(keys, args)
  if redis.call('HGET', keys[1], 'holder') == args[1] then
    return redis.call('DEL', keys[1])
  end
  return 0
end)
`

func openFenced(addrs []string) (func(string) (Locker, error), func(), error) {
	client := redis.NewClient(&redis.Options{Addr: addrs[0]})
	if err := client.FunctionLoadReplace(context.Background(), fencedLibrary).Err(); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("FUNCTION LOAD: %w", err)
	}
	ttl := strconv.FormatInt(sharedTTL.Milliseconds(), 10)
	toks := newTokens()
	return func(key string) (Locker, error) {
		keys := []string{key}
		var last int64
		return Locker{
			Lock: func(ctx context.Context) (func() error, error) {
				token := toks.next()
				fence, err := client.FCall(ctx, "peerbench_acquire", keys, token, ttl).Int64()
				if err != nil {
					if errors.Is(err, redis.Nil) {
						return nil, errNotObtained
					}
					return nil, err
				}
				// Each Locker is one worker's, so its fences are seen in order.
				if fence <= last {
					return nil, fmt.Errorf("fence %d after %d: not increasing", fence, last)
				}
				last = fence
				return func() error {
					return deletedOne(client.FCall(context.Background(), "peerbench_release", keys, token).Int())
				}, nil
			},
			Close: noClose,
		}, nil
	}, func() { client.Close() }, nil
}

// deletedOne returns a release's outcome from its reply, the number of locks it deleted: an
// error, or errNotHeld unless it deleted one.
func deletedOne(n int, err error) error {
	if err != nil {
		return err
	}
	if n != 1 {
		return errNotHeld
	}
	return nil
}

// storeLockers makes Leasehold Mutex Lockers on store.
func storeLockers(store core.Store) func(string) (Locker, error) {
	return func(key string) (Locker, error) {
		return leaseholdLocker(store, key, mutex, noClose)
	}
}

func openLeaseholdGoredis(addrs []string) (func(string) (Locker, error), func(), error) {
	client := redis.NewClient(&redis.Options{Addr: addrs[0]})
	s, err := goredis.New(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return storeLockers(s), func() { s.Close(); client.Close() }, nil
}

func openLeaseholdValkey(addrs []string) (func(string) (Locker, error), func(), error) {
	client, err := vk.NewClient(vk.ClientOption{InitAddress: addrs[:1], DisableCache: true})
	if err != nil {
		return nil, nil, err
	}
	s, err := valkey.New(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return storeLockers(s), func() { s.Close(); client.Close() }, nil
}

func openLeaseholdRedlock(addrs []string) (func(string) (Locker, error), func(), error) {
	var stores []core.Store
	var closers []func()
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	for _, a := range addrs {
		client := redis.NewClient(&redis.Options{Addr: a})
		s, err := goredis.New(client)
		if err != nil {
			client.Close()
			closeAll()
			return nil, nil, err
		}
		stores = append(stores, s)
		closers = append(closers, func() { s.Close(); client.Close() })
	}
	rl, err := redlock.New(stores)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return storeLockers(rl), closeAll, nil
}

func openRedsync(addrs []string) (func(string) (Locker, error), func(), error) {
	var pools []redsyncredis.Pool
	var clients []*redis.Client
	for _, a := range addrs {
		client := redis.NewClient(&redis.Options{Addr: a})
		clients = append(clients, client)
		pools = append(pools, rsgoredis.NewPool(client))
	}
	rs := redsync.New(pools...)
	return func(key string) (Locker, error) {
			return redsyncLocker(rs.NewMutex(key), noClose), nil
		}, func() {
			for _, c := range clients {
				c.Close()
			}
		}, nil
}

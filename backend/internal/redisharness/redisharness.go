// Package redisharness makes Stores of both Redis adapters for tests and hooks them to the
// conformance suite: one harness serves go-redis (backend/goredis) and valkey-go
// (backend/valkey), and the tests of the shared core (backend/internal/rediscore) make their
// Stores here too. It is a package of its own, not part of backend/redistest, so that the
// programs that start servers with redistest (bench) do not build miniredis, the conformance
// suite or both clients.
package redisharness

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
)

// Store is a Store of either adapter: a core.Store, core.Notifier and core.Watcher that can be
// closed.
type Store interface {
	core.Store
	core.Notifier
	core.Watcher
	Close() error
}

// Driver makes a Store of one adapter over a new client to addrs (one address: a standalone
// server; several: a Cluster's nodes); the Store and the client are closed when t ends.
type Driver func(t testing.TB, addrs ...string) Store

// Drivers are both adapters, by name.
var Drivers = map[string]Driver{"goredis": GoRedis, "valkey": Valkey}

// GoRedis is the Driver of backend/goredis: a *redis.Client, or a *redis.ClusterClient for
// several addresses.
func GoRedis(t testing.TB, addrs ...string) Store {
	t.Helper()
	var c redis.UniversalClient
	if len(addrs) == 1 {
		c = redis.NewClient(&redis.Options{Addr: addrs[0]})
	} else {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		c.Close()
	})
	return s
}

// Valkey is the Driver of backend/valkey: a valkey-go client without client-side caching, which
// finds a Cluster by itself.
func Valkey(t testing.TB, addrs ...string) Store {
	t.Helper()
	c, err := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := valkey.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		c.Close()
	})
	return s
}

// harness is a conformance.Harness: every Store it makes reaches the same server.
type harness struct {
	driver Driver
	addrs  []string
	mini   *miniredis.Miniredis // set when the suite moves the server's clock
	now    time.Time
}

func (h *harness) NewStore(t *testing.T) core.Store { return h.driver(t, h.addrs...) }

func (h *harness) Advance(d time.Duration) bool {
	if h.mini == nil {
		return false
	}
	h.now = h.now.Add(d)
	h.mini.SetTime(h.now)
	h.mini.FastForward(d)
	return true
}

// Miniredis returns a harness of d's Stores on a fresh miniredis, whose clock the suite moves
// by hand.
func Miniredis(t *testing.T, d Driver) conformance.Harness {
	m := miniredis.RunT(t)
	h := &harness{driver: d, addrs: []string{m.Addr()}, mini: m, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m.SetTime(h.now)
	return h
}

// Server returns a harness of d's Stores on a fresh redis-server, on real time.
func Server(t *testing.T, d Driver) conformance.Harness {
	return &harness{driver: d, addrs: []string{redistest.StartServer(t).Addr}}
}

// Cluster returns a harness of d's Stores on a fresh Redis Cluster of three masters, on real
// time.
func Cluster(t *testing.T, d Driver) conformance.Harness {
	return &harness{driver: d, addrs: redistest.StartCluster(t, 3)}
}

package rediscore_test

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Helpers of the tests that run both drivers: the conditions a test waits for (with poll.Until)
// instead of sleeping, what they read from the server, and the setups several tests share.

// acquireInBackground starts m.Acquire on a goroutine of its own and returns where its lease
// will come (nil, with t failed, if the Acquire fails).
func acquireInBackground(t *testing.T, m *primitives.Mutex) <-chan core.Lease {
	got := make(chan core.Lease, 1)
	go func() {
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// drain clears a wake pending on w, if there is one.
func drain(w core.Wake) {
	select {
	case <-w.C():
	default:
	}
}

// mustAcquire sends req to s once and fails t unless it succeeds with Granted as granted.
func mustAcquire(t *testing.T, s core.Store, req core.AcquireRequest, granted bool) core.AcquireResult {
	t.Helper()
	res, err := s.Acquire(context.Background(), req)
	if err != nil || res.Granted != granted {
		t.Fatalf("Acquire(%s, %d permits) = %+v, %v; want granted %v", req.Holder, req.Permits, res, err, granted)
	}
	return res
}

// commands returns the number of commands clients have sent the server.
func commands(t *testing.T, addr string) int { return redistest.ClientCommands(t, addr) }

// lineLen returns the number of waiters in key's line.
func lineLen(t *testing.T, addr, key string) int { return zcard(t, addr, key, 1) }

// zcard returns the size of the i-th Redis key of key (a sorted set).
func zcard(t *testing.T, addr, key string, i int) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	n, err := c.ZCard(context.Background(), rediscore.Keys(key)[i]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// subscribers returns how many Stores the server at addr has subscribed to their channel of key
// (a key without glob characters): PUBSUB CHANNELS, one channel per Store (rediscore.Channel).
func subscribers(t testing.TB, addr, key string) int {
	t.Helper()
	v, err := redistest.Do(addr, "PUBSUB", "CHANNELS", rediscore.Channel(key, "*"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(v), "*")) // Do returns an array's header
	if err != nil {
		t.Fatalf("PUBSUB CHANNELS: %q: %v", v, err)
	}
	return n
}

// watched is a store that keeps the waiters it registers, so that a test can wait until the
// waiters of a Mutex on it have settled: enrolled, their subscription confirmed, and every wake
// so far acted on, so that they send nothing until the next wake.
type watched struct {
	redisharness.Store
	mu      sync.Mutex
	waiters []*watchedWaiter
}

func watch(s redisharness.Store) *watched { return &watched{Store: s} }

func (s *watched) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	w, err := s.Store.Register(ctx, req)
	if err != nil {
		return nil, err
	}
	ww := &watchedWaiter{Wake: w}
	s.mu.Lock()
	s.waiters = append(s.waiters, ww)
	s.mu.Unlock()
	return ww, nil
}

// settled reports whether the store has registered a waiter and every one it has is settled.
func (s *watched) settled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.waiters {
		if !w.settled.Load() {
			return false
		}
	}
	return len(s.waiters) > 0
}

// registered returns how many waiters the store has registered.
func (s *watched) registered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// unsettle forgets that the waiters settled, for a test about to disturb them: they settle
// again when their owner next finds them Reliable with no wake pending.
func (s *watched) unsettle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.waiters {
		w.settled.Store(false)
	}
}

type watchedWaiter struct {
	core.Wake
	settled atomic.Bool
}

// Reliable is asked by the waiter's owner (primitives) before each wait. A waiter that is
// Reliable then has had its confirmation's wake sent already; with no wake pending either, the
// owner is about to wait for the next wake, sending nothing until it comes.
func (w *watchedWaiter) Reliable() bool {
	r := w.Wake.Reliable()
	w.settled.Store(r && len(w.Wake.C()) == 0)
	return r
}

// drivers returns the drivers a test runs on, by name: both, or under -short one of them (the
// inner loop: `go test ./...` runs both), the same one for a test at every run and each for half
// the tests. What a driver does differently is tested in its own package (backend/goredis,
// backend/valkey) on every run.
func drivers(t *testing.T) map[string]redisharness.Driver {
	if !testing.Short() {
		return redisharness.Drivers
	}
	name := shortDriver(t)
	return map[string]redisharness.Driver{name: redisharness.Drivers[name]}
}

// shortDriver is the driver a test runs on under -short: picked by a hash of its name.
func shortDriver(t *testing.T) string {
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	return []string{"goredis", "valkey"}[h.Sum32()%2]
}

// eachDriver runs f for each driver on a fresh redis-server (at addr), and for a mix of both ("mixed":
// the Stores alternate between the drivers).
func eachDriver(t *testing.T, f func(t *testing.T, mk func() redisharness.Store, addr string)) {
	eachDriverWith(t, false, f)
}

// eachDriverInParallel is eachDriver with the three runs at once, for a test that shares no
// package-level hook (SetTimings, OnReclaim, noLeaks).
func eachDriverInParallel(t *testing.T, f func(t *testing.T, mk func() redisharness.Store, addr string)) {
	eachDriverWith(t, true, f)
}

// eachDriverAlone is eachDriverInParallel for a test that makes one Store: the two drivers,
// without "mixed", whose one Store would be go-redis's again.
func eachDriverAlone(t *testing.T, f func(t *testing.T, mk func() redisharness.Store, addr string)) {
	eachDriverWith(t, true, f, "goredis", "valkey")
}

func eachDriverWith(t *testing.T, parallel bool, f func(t *testing.T, mk func() redisharness.Store, addr string), names ...string) {
	if len(names) == 0 {
		names = []string{"goredis", "valkey", "mixed"}
	}
	if testing.Short() {
		// One run: the mix, whose Stores alternate between the drivers, or, for a test of one
		// Store, the driver drivers(t) picks.
		if slices.Contains(names, "mixed") {
			names = []string{"mixed"}
		} else {
			names = []string{shortDriver(t)}
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			srv := redistest.StartServer(t)
			var n int
			mk := func() redisharness.Store {
				d := redisharness.Drivers[name]
				if d == nil { // mixed
					d = redisharness.Drivers[[]string{"goredis", "valkey"}[n%2]]
				}
				n++
				return d(t, srv.Addr)
			}
			f(t, mk, srv.Addr)
		})
	}
}

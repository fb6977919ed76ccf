package goredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore returns a Store over a fresh client from newClient, closed when t ends.
func newStore(t *testing.T, client redis.UniversalClient, opts ...goredis.Option) *goredis.Store {
	t.Helper()
	s, err := goredis.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		client.Close()
	})
	return s
}

// miniHarness runs the suite on miniredis with its clock moved by hand.
type miniHarness struct {
	m   *miniredis.Miniredis
	now time.Time
}

func newMiniHarness(t *testing.T) *miniHarness {
	m := miniredis.RunT(t)
	h := &miniHarness{m: m, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m.SetTime(h.now)
	return h
}

func (h *miniHarness) NewStore(t *testing.T) core.Store {
	return newStore(t, redis.NewClient(&redis.Options{Addr: h.m.Addr()}))
}

func (h *miniHarness) Advance(d time.Duration) bool {
	h.now = h.now.Add(d)
	h.m.SetTime(h.now)
	h.m.FastForward(d)
	return true
}

func TestConformanceMiniredis(t *testing.T) { conformance.Run(t, newMiniHarness(t)) }

// realHarness runs the suite on a real redis-server, on real time.
type realHarness struct {
	newClient func() redis.UniversalClient
}

func (h realHarness) NewStore(t *testing.T) core.Store { return newStore(t, h.newClient()) }
func (realHarness) Advance(time.Duration) bool         { return false }

func TestConformanceRedisServer(t *testing.T) {
	srv := redistest.StartServer(t)
	conformance.Run(t, realHarness{func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: srv.Addr}) }})
}

func TestConformanceRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	conformance.Run(t, realHarness{func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}})
}

func TestSmokeContext(t *testing.T) {
	_ = context.Background
}

// TestFaultMiniredisTimeJumps: the server's clock jumps forward past a lease's TTL (the lease
// expires; the next grant gets a higher fence) and then back (a lease lasts longer; fences still
// only go up), on miniredis, whose clock the test sets.
func TestFaultMiniredisTimeJumps(t *testing.T) {
	m := miniredis.RunT(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(t0)
	s := newStore(t, redis.NewClient(&redis.Options{Addr: m.Addr()}))
	ctx := context.Background()
	req := func(holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: "jump", Holder: holder, Permits: 1, Limit: 1, TTL: 10 * time.Second}
	}
	grant := func(holder string, want bool) uint64 {
		t.Helper()
		res, err := s.Acquire(ctx, req(holder))
		if err != nil || res.Granted != want {
			t.Fatalf("Acquire(%s) = %+v, %v; want granted %v", holder, res, err, want)
		}
		return res.Fence
	}
	fa := grant("a", true)
	grant("b", false)
	m.SetTime(t0.Add(20 * time.Second)) // forward past a's TTL
	fb := grant("b", true)
	if fb <= fa {
		t.Fatalf("fence %d after a forward jump, not above %d", fb, fa)
	}
	if _, err := s.Extend(ctx, core.ExtendRequest{Key: "jump", Holder: "a", TTL: 10 * time.Second}); !errors.Is(err, core.ErrLost) {
		t.Errorf("extending the lease the jump expired: %v, want ErrLost", err)
	}
	m.SetTime(t0) // back by 20 s: b's lease now has 30 s left
	grant("c", false)
	if held, err := s.Release(ctx, core.ReleaseRequest{Key: "jump", Holder: "b"}); err != nil || !held {
		t.Fatalf("Release(b) = %v, %v", held, err)
	}
	if fc := grant("c", true); fc <= fb {
		t.Fatalf("fence %d after the clock went back, not above %d", fc, fb)
	}
}

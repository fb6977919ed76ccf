package goredis_test

import (
	"context"
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

package rediscore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestBracesInKeysOnCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(); c.Close() }()
	for _, key := range []string{"{a}", "a}b", "}", "{}", "x{y}z"} {
		m, _ := primitives.NewMutex(s, key)
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatalf("key %q on a cluster: %v", key, err)
		}
		if _, err := m.TryAcquire(context.Background()); !errors.Is(err, core.ErrNotAcquired) {
			t.Errorf("key %q: second TryAcquire err = %v, want ErrNotAcquired", key, err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("key %q: %v", key, err)
		}
	}
}

func TestInspectOfUnusedKeyCreatesNothing(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			snap, err := s.Inspect(context.Background(), "never-used")
			if err != nil || len(snap.Leases) != 0 || snap.Limit != 0 {
				t.Fatalf("Inspect of an unused key: %+v, %v", snap, err)
			}
			if n, _ := redistest.Do(srv.Addr, "DBSIZE"); n != ":0\r\n" {
				t.Errorf("Inspect created keys: DBSIZE %q", n)
			}
		})
	}
}

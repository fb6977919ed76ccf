package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestOnCluster runs the tests that need a Redis Cluster of three masters on one, which takes
// seconds to start.
func TestOnCluster(t *testing.T) {
	testenv.SkipShort(t, "a Redis Cluster takes seconds to start")
	t.Parallel()
	addrs := redistest.StartCluster(t, 3)
	t.Run("RWMutexAndElection", func(t *testing.T) { rwMutexAndElectionOnCluster(t, addrs) })
	t.Run("BracesInKeys", func(t *testing.T) { bracesInKeysOnCluster(t, addrs) })
	t.Run("ClusterAndRingExcludeOnManyKeys", func(t *testing.T) { clusterAndRingExcludeOnManyKeys(t, addrs) })
	t.Run("MultiLock", func(t *testing.T) { multiLockOnCluster(t, addrs) })
	t.Run("NodeFenceAlone", func(t *testing.T) { nodeFenceAloneOnCluster(t, addrs) })
	t.Run("ReloadsWhereALibraryIsMissing", func(t *testing.T) { clusterReloadsWhereALibraryIsMissing(t, addrs) }) // last: it deletes the library
}

// rwMutexAndElectionOnCluster: RWMutex and Election on a Cluster, through both drivers, each
// primitive with a Store of its own: the same scenarios as on one server, with no code of the
// Cluster's own. Observe, with a retry interval of an hour, is woken only by the Watch's
// messages, which travel by the Cluster's pub/sub.
func rwMutexAndElectionOnCluster(t *testing.T, addrs []string) {
	for _, name := range []string{"goredis", "valkey"} {
		mk := func() redisharness.Store { return redisharness.Drivers[name](t, addrs...) }
		t.Run(name+"/RWStress", func(t *testing.T) {
			var rws []*primitives.RWMutex
			for range 3 {
				rws = append(rws, scenario.MustRWMutex(t, mk(), "rw:"+name, primitives.WithRetryInterval(time.Millisecond), primitives.WithAcquireTimeout(time.Minute)))
			}
			if peak := scenario.RWStress(t, rws, 8, 10, time.Millisecond); peak < 2 {
				t.Errorf("at most %d reader at once: readers did not share the key", peak)
			}
		})
		t.Run(name+"/WriterNotStarved", func(t *testing.T) {
			rd := scenario.MustRWMutex(t, mk(), "starve:"+name)
			wr := scenario.MustRWMutex(t, mk(), "starve:"+name, primitives.WithAcquireTimeout(5*time.Second))
			scenario.WriterNotStarved(t, rd, wr, scenario.WriterInLine(rd))
		})
		t.Run(name+"/OneLeaderAtATime", func(t *testing.T) {
			var els []*primitives.Election
			for range 3 {
				els = append(els, scenario.MustElection(t, mk(), "lead:"+name, primitives.WithRetryInterval(time.Millisecond)))
			}
			scenario.OneLeaderAtATime(t, els, 10)
		})
		t.Run(name+"/ObserveSeesEveryChange", func(t *testing.T) {
			els := []*primitives.Election{scenario.MustElection(t, mk(), "obs:"+name), scenario.MustElection(t, mk(), "obs:"+name)}
			obs := scenario.MustElection(t, mk(), "obs:"+name, primitives.WithRetryInterval(time.Hour))
			scenario.ObserveSeesEveryChange(t, els, obs)
		})
	}
}

// bracesInKeysOnCluster: keys with braces of every kind (a hash tag, or braces that are not one)
// lock on a Cluster.
func bracesInKeysOnCluster(t *testing.T, addrs []string) {
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

// clusterAndRingExcludeOnManyKeys: on a Cluster (both drivers) and a go-redis Ring, two
// Stores contend on more keys than a Store keeps names of, from many goroutines: on every key
// exactly one holds the lease at a time, and each release hands it to the other.
func clusterAndRingExcludeOnManyKeys(t *testing.T, addrs []string) {
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	ring := func(t *testing.T) redisharness.Store {
		c := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
		s, err := goredis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(); c.Close() })
		return s
	}
	makers := map[string]func(t *testing.T) redisharness.Store{"ring": ring}
	for name, mk := range drivers(t) {
		makers["cluster/"+name] = func(t *testing.T) redisharness.Store { return mk(t, addrs...) }
	}
	for name, mk := range makers {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s1, s2 := mk(t), mk(t)
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 20 {
						key := fmt.Sprintf("many:%s:%d:%d", name, g, i)
						req := core.AcquireRequest{Key: key, Holder: "one", Permits: 1, Limit: 1, TTL: time.Minute}
						r1, err := s1.Acquire(ctx, req)
						if err != nil || !r1.Granted {
							t.Errorf("%s: first acquire: %+v, %v", key, r1, err)
							return
						}
						req.Holder = "two"
						if r2, err := s2.Acquire(ctx, req); err != nil || r2.Granted {
							t.Errorf("%s: second holder while the first holds: %+v, %v", key, r2, err)
							return
						}
						if held, err := s1.Release(ctx, core.ReleaseRequest{Key: key, Holder: "one", Fence: r1.Fence}); err != nil || !held {
							t.Errorf("%s: release: %v, %v", key, held, err)
							return
						}
						if r2, err := s2.Acquire(ctx, req); err != nil || !r2.Granted || r2.Fence <= r1.Fence {
							t.Errorf("%s: second holder after the release: %+v, %v (first fence %d)", key, r2, err, r1.Fence)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// clusterReloadsWhereALibraryIsMissing: on a Cluster, FUNCTION DELETE on one primary, then
// calls on keys of every slot: each works (the first that finds it missing loads it again).
func clusterReloadsWhereALibraryIsMissing(t *testing.T, addrs []string) {
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, addrs...)
			for i := range 30 {
				pairOn(t, s, fmt.Sprint("cl:", name, i))
			}
			for _, victim := range addrs {
				reply, err := redistest.Do(victim, "FUNCTION", "DELETE", rediscore.LibraryName)
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(reply, "-") {
					continue // a replica
				}
				for i := range 30 {
					pairOn(t, s, fmt.Sprint("cl:", name, i))
				}
				if libs := libraries(t, victim); len(libs) != 1 || libs[0].Name != rediscore.LibraryName {
					t.Fatalf("%s has %+v after the calls; want the library loaded again", victim, libs)
				}
			}
		})
	}
}

// nodeFenceAloneOnCluster: on a Cluster, through both drivers, a Redlock node's release of its
// last lease in the lease hash (a limit of 2), its fence a second above the clock, leaves the
// fence alone as the string on keys of every master, and the next grant is above it.
func nodeFenceAloneOnCluster(t *testing.T, addrs []string) {
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	for _, name := range []string{"goredis", "valkey"} {
		s := redisharness.Drivers[name](t, addrs...)
		for i := range 8 {
			key := fmt.Sprintf("nodefence:%s:%d", name, i)
			req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 2, TTL: time.Minute}
			r, err := s.(core.FenceRaiser).AcquireAbove(ctx, req, uint64(time.Now().Add(time.Second).UnixMicro()))
			if err != nil || !r.Granted {
				t.Fatalf("%s: AcquireAbove: %+v, %v", key, r, err)
			}
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: r.Fence}); !ok || err != nil {
				t.Fatalf("%s: Release: %v, %v", key, ok, err)
			}
			if got, want := c.Get(ctx, rediscore.Keys(key)[0]).Val(), rediscore.LoneTag+fmt.Sprint(r.Fence); got != want {
				t.Fatalf("%s: after the release the key holds %q; want the fence alone, %q", key, got, want)
			}
			req.Holder, req.Limit = "b", 1
			if next, err := s.Acquire(ctx, req); err != nil || !next.Granted || next.Fence <= r.Fence {
				t.Fatalf("%s: the next grant: %+v, %v; want one above %d", key, next, err, r.Fence)
			}
		}
	}
}

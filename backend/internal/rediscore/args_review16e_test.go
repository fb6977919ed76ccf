package rediscore_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// pathStores makes a Store of each driver for each way of running the scripts: FCALL, and
// EVALSHA for a user that may not load or call functions.
func pathStores(t *testing.T, addr string) map[string]redisharness.Store {
	do(t, addr, append([]string{"ACL", "SETUSER", "evalsha"}, strings.Fields(ACLRules)...)...)
	do(t, addr, append(append([]string{"ACL", "SETUSER", "fcall"}, strings.Fields(ACLRules)...), "+fcall", "+function|load")...)
	out := map[string]redisharness.Store{}
	for driver, mk := range userStores(addr) {
		for _, user := range []string{"fcall", "evalsha"} {
			out[driver+"/"+user] = mk(t, user)
		}
	}
	return out
}

// monitor is a MONITOR connection to a server: what every client sends it, line by line.
type monitor struct {
	c net.Conn
	r *bufio.Reader
}

func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := &monitor{c: c, r: bufio.NewReader(c)}
	c.Write([]byte("*1\r\n$7\r\nMONITOR\r\n"))
	if line := m.next(t); !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q", line)
	}
	return m
}

func (m *monitor) next(t *testing.T) string {
	t.Helper()
	m.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := m.r.ReadString('\n')
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	return line
}

// await returns the first command seen that contains every one of parts.
func (m *monitor) await(t *testing.T, parts ...string) string {
	t.Helper()
	for {
		line := m.next(t)
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return line
		}
	}
}

// TestFencesAboveTwoToTheSixtyThreeAreSentInDecimal: a release's fence is sent as the uint64 in
// decimal, exactly, by both drivers and both ways of running the scripts; a fence that is not
// the lease's, however large, releases nothing, and the lease's own releases it.
func TestFencesAboveTwoToTheSixtyThreeAreSentInDecimal(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	for name, s := range pathStores(t, srv.Addr) {
		t.Run(name, func(t *testing.T) {
			key := "fence16e:" + name
			res := mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}, true)
			m := startMonitor(t, srv.Addr)
			for _, fence := range []uint64{1 << 63, 1<<63 + 1, math.MaxUint64, 1 << 53, 1<<53 + res.Fence, res.Fence + 1} {
				held, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: fence})
				if err != nil || held {
					t.Fatalf("release with fence %d of a lease of fence %d: %v, %v; want false", fence, res.Fence, held, err)
				}
				m.await(t, `"leasehold:{`+key+`}:lease"`, `"h" "`+strconv.FormatUint(fence, 10)+`"`)
			}
			snap, err := s.Inspect(ctx, key)
			if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Fence != res.Fence {
				t.Fatalf("after releases with other fences: %+v, %v; want the lease", snap, err)
			}
			if held, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); err != nil || !held {
				t.Fatalf("release with the lease's fence %d: %v, %v", res.Fence, held, err)
			}
			m.await(t, `"h" "`+strconv.FormatUint(res.Fence, 10)+`"`)
		})
	}
}

// TestEachCallSendsItsOwnTTL: calls on one Store whose TTLs change from call to call, some equal
// to one sent before, some sharing its kept slot, each give the lease their own TTL, by both
// drivers and both ways of running the scripts.
func TestEachCallSendsItsOwnTTL(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	ttls := []time.Duration{time.Minute, 2 * time.Minute, time.Minute + 8*time.Millisecond, 10 * time.Minute,
		time.Minute, time.Minute + 16*time.Millisecond, 3 * time.Minute, time.Minute + time.Nanosecond}
	for name, s := range pathStores(t, srv.Addr) {
		t.Run(name, func(t *testing.T) {
			key := "ttl16e:" + name
			check := func(op string, ttl time.Duration) {
				t.Helper()
				snap, err := s.Inspect(ctx, key)
				if err != nil || len(snap.Leases) != 1 {
					t.Fatalf("after %s with TTL %v: %+v, %v", op, ttl, snap, err)
				}
				if got := snap.Leases[0].TTL; got > ttl+time.Millisecond || got < ttl-5*time.Second {
					t.Fatalf("after %s with TTL %v: the lease has %v left", op, ttl, got)
				}
			}
			for i, ttl := range ttls {
				// Another key first, with another TTL, so that the kept TTL is not this one's.
				other := ttls[(i+3)%len(ttls)]
				mustAcquire(t, s, core.AcquireRequest{Key: key + ":other", Holder: "h", Permits: 1, Limit: 1, TTL: other, Wait: ttl}, true)
				mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: ttl, Wait: other}, true)
				check("acquire", ttl)
				ext := ttls[(i+5)%len(ttls)]
				if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: ext}); err != nil {
					t.Fatal(err)
				}
				check("extend", ext)
			}
		})
	}
}

// TestClusterAndRingExcludeOnManyKeys: on a Cluster (both drivers) and a go-redis Ring, two
// Stores contend on more keys than a Store keeps names of, from many goroutines: on every key
// exactly one holds the lease at a time, and each release hands it to the other.
func TestClusterAndRingExcludeOnManyKeys(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
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
	for name, mk := range redisharness.Drivers {
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
						key := fmt.Sprintf("many16e:%s:%d:%d", name, g, i)
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

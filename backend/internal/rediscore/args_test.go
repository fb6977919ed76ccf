package rediscore_test

import (
	"bufio"
	"context"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
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
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	for name, s := range pathStores(t, srv.Addr) {
		t.Run(name, func(t *testing.T) {
			key := "fence:" + name
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
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	ttls := []time.Duration{time.Minute, 2 * time.Minute, time.Minute + 8*time.Millisecond, 10 * time.Minute,
		time.Minute, time.Minute + 16*time.Millisecond, 3 * time.Minute, time.Minute + time.Nanosecond}
	for name, s := range pathStores(t, srv.Addr) {
		t.Run(name, func(t *testing.T) {
			key := "ttl:" + name
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

// TestNumbersAtTheirEdges: a lease at the highest fence floor the Store honours
// (2^53 − 2^32) and the longest TTL (core.MaxDuration), a waiter in line for the longest Wait,
// whose grant from the line (taken from its message, with no command) is fenced above it, then
// extended for the longest TTL, released, and the key's next grant (the fast path, on a hash
// that lasts long enough) fenced above again: every call succeeds, fences strictly increase, the
// TTLs are what was asked, and every Redis key left lives on (no expiry computed out of range).
func TestNumbersAtTheirEdges(t *testing.T) {
	t.Parallel()
	const top = 1<<53 - 1<<32
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		ctx := context.Background()
		a, b := mk(), mk()
		c := raw(t, addr)
		req := func(holder string) core.AcquireRequest {
			return core.AcquireRequest{Key: "edge", Holder: holder, Permits: 2, Limit: 2, TTL: core.MaxDuration, Unshared: true}
		}
		ra, err := a.(core.FenceRaiser).RaiseFence(ctx, req("a"), top)
		if err != nil || !ra.Granted || ra.Fence != top {
			t.Fatalf("RaiseFence to 2^53-2^32 = %+v, %v", ra, err)
		}
		wb := req("b")
		wb.Wait = core.MaxDuration
		rb, err := b.Acquire(ctx, wb)
		if err != nil || rb.Granted {
			t.Fatalf("b's try while a holds = %+v, %v; want a refusal", rb, err)
		}
		w, err := b.Register(ctx, wb)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		poll.Until(t, "the waiter's subscription confirmed", w.Reliable)
		if ok, err := a.Release(ctx, core.ReleaseRequest{Key: "edge", Holder: "a", Fence: ra.Fence}); !ok || err != nil {
			t.Fatalf("a's Release = %v, %v", ok, err)
		}
		<-w.C()
		gb, err := b.Acquire(ctx, wb)
		if err != nil || !gb.Granted || gb.Fence != top+1 {
			t.Fatalf("b's Acquire after the line granted it = %+v, %v; want fence %d", gb, err, uint64(top+1))
		}
		eb, err := b.Extend(ctx, core.ExtendRequest{Key: "edge", Holder: "b", TTL: core.MaxDuration})
		if err != nil || eb.Fence != gb.Fence {
			t.Fatalf("b's Extend = %+v, %v", eb, err)
		}
		snap, err := b.Inspect(ctx, "edge")
		if err != nil || len(snap.Leases) != 1 || snap.Leases[0].TTL < core.MaxDuration-time.Minute || snap.Leases[0].TTL > core.MaxDuration {
			t.Fatalf("Inspect = %+v, %v; want b's lease with a TTL of about core.MaxDuration", snap, err)
		}
		if ok, err := b.Release(ctx, core.ReleaseRequest{Key: "edge", Holder: "b", Fence: gb.Fence}); !ok || err != nil {
			t.Fatalf("b's Release = %v, %v", ok, err)
		}
		rc, err := a.Acquire(ctx, req("c"))
		if err != nil || !rc.Granted || rc.Fence != top+2 {
			t.Fatalf("c's Acquire = %+v, %v; want fence %d", rc, err, uint64(top+2))
		}
		for _, k := range rediscore.Keys("edge") {
			if ttl := c.PTTL(ctx, k).Val(); ttl == -1 || (ttl >= 0 && ttl < time.Hour) {
				t.Errorf("%s: PTTL %v; want none (no key) or a long one", k, ttl)
			}
		}
	})
}

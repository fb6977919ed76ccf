package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/redlock"
)

// TestRedlockOverLoneLeasesGivesFencesThatOnlyGrow: a Redlock over three redis-servers (nodes of
// both drivers). Its own grants are lease hashes (its floor, its clock plus a second, is above the
// nodes' clocks, and each node keeps it until its clock passes it), so before its first acquire
// the holder takes the key on two nodes directly, lone leases there, which the Redlock's acquire
// re-grants and its raise turns into the hash at the quorum's fence. Holders take turns, each re-acquires what it holds (same fence) and
// releases, a second holder's try between is refused; the quorum's fences only grow, and each
// node leaves nothing once released and its clock past the last fence.
func TestRedlockOverLoneLeasesGivesFencesThatOnlyGrow(t *testing.T) {
	t.Parallel()
	var nodes []core.Store
	var addrs []string
	for i := range 3 {
		srv := redistest.StartServer(t)
		addrs = append(addrs, srv.Addr)
		nodes = append(nodes, redisharness.Drivers[[]string{"goredis", "valkey"}[i%2]](t, srv.Addr))
	}
	rl, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const key = "rl"
	var last uint64
	for i := range 40 {
		h := []string{"a", "b"}[i%2]
		req := core.AcquireRequest{Key: key, Holder: h, Permits: 1, Limit: 1, TTL: time.Minute}
		if i == 0 {
			for j, n := range nodes[:2] {
				if r, err := n.Acquire(ctx, req); err != nil || !r.Granted {
					t.Fatalf("the lone lease on node %d: %+v, %v", j, r, err)
				}
				if typ := raw(t, addrs[j]).Type(ctx, rediscore.Keys(key)[0]).Val(); typ != "string" {
					t.Fatalf("the holder's own lease on node %d is a %s; want a lone lease", j, typ)
				}
			}
		}
		r, err := rl.Acquire(ctx, req)
		if err != nil || !r.Granted || r.Fence <= last {
			t.Fatalf("grant %d: %+v, %v; want a fence above %d", i, r, err, last)
		}
		last = r.Fence
		if again, err := rl.Acquire(ctx, req); err != nil || !again.Granted || again.Fence != r.Fence {
			t.Fatalf("re-acquire %d: %+v, %v; want fence %d", i, again, err, r.Fence)
		}
		if other, err := rl.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "x", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || other.Granted {
			t.Fatalf("a second holder's try %d: %+v, %v", i, other, err)
		}
		if ok, err := rl.Release(ctx, core.ReleaseRequest{Key: key, Holder: h, Fence: r.Fence}); !ok || err != nil {
			t.Fatalf("release %d: %v, %v", i, ok, err)
		}
	}
	for _, a := range addrs {
		c := raw(t, a)
		poll.Until(t, "the node to leave nothing", func() bool { return len(c.Keys(ctx, "*").Val()) == 0 })
	}
}

// TestNodeReleaseOfAHashLeavesTheFenceAloneAsAString: a Redlock node's lease held in the hash (a
// limit of 2 takes it there) released while its fence, a floor a second ahead, is above the
// clock, leaves the fence alone as the lone string, not the hash: so the key's next Mutex pair
// takes the lone tiers again (a hash kept until the clock passed the fence kept every pair of a
// busy key on the general paths), at a fence above the one released.
func TestNodeReleaseOfAHashLeavesTheFenceAloneAsAString(t *testing.T) {
	t.Parallel()
	for _, drv := range []string{"goredis", "valkey"} {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			node := redisharness.Drivers[drv](t, srv.Addr).(core.FenceRaiser)
			c, ctx := raw(t, srv.Addr), context.Background()
			const key = "node"
			state := rediscore.Keys(key)[0]
			floor := uint64(time.Now().Add(time.Second).UnixMicro())
			req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 2, TTL: time.Minute}
			r, err := node.AcquireAbove(ctx, req, floor)
			if err != nil || !r.Granted || r.Fence < floor {
				t.Fatalf("AcquireAbove(limit 2): %+v, %v; want a grant at %d or above", r, err, floor)
			}
			if typ := c.Type(ctx, state).Val(); typ != "hash" {
				t.Fatalf("a lease of limit 2 is a %s; want the hash", typ)
			}
			if ok, err := node.(core.Store).Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: r.Fence}); err != nil || !ok {
				t.Fatalf("Release: %v, %v", ok, err)
			}
			if typ := c.Type(ctx, state).Val(); typ != "string" {
				t.Fatalf("after the release, above the clock, the key is a %s; want the fence alone, a string", typ)
			}
			if pttl := c.PTTL(ctx, state).Val(); pttl <= 0 || pttl > 2*time.Second {
				t.Errorf("the fence alone lasts %v; want until the clock passes it, a second or so", pttl)
			}
			req.Holder, req.Limit = "b", 1
			next, err := node.AcquireAbove(ctx, req, uint64(time.Now().UnixMicro()))
			if err != nil || !next.Granted || next.Fence <= r.Fence {
				t.Fatalf("the next grant: %+v, %v; want one above %d", next, err, r.Fence)
			}
			if typ := c.Type(ctx, state).Val(); typ != "string" {
				t.Errorf("the next Mutex grant is a %s; want a lone lease", typ)
			}
		})
	}
}

package rediscore_test

import (
	"context"
	"maps"
	"strconv"
	"strings"
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

// TestNodeReleaseKeepsTheHashForWhatItStillRecords: the release of a Redlock node's last lease in
// the lease hash, its fence above the clock, by the fast path and by the general path alone,
// leaves the fence alone as a string (the key's fence, not the lease's, until the clock passes
// it) only when the hash records nothing else in use: a live watch (whose watchers are told), a
// left try, or another holder's expired lease in its lock delay keeps the hash, with its record
// and fence.
func TestNodeReleaseKeepsTheHashForWhatItStillRecords(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	nowMs, nowUs := now.UnixMilli(), now.UnixMicro()
	s := func(x int64) string { return strconv.FormatInt(x, 10) }
	fence, keyFence := nowUs+5000, nowUs+6000
	base := func(extra map[string]string) map[string]string {
		h := map[string]string{":h": "1 " + s(fence) + " " + s(nowMs+60000), "fence": s(keyFence), "limit": "2",
			rediscore.KeepField: s(nowMs + 600000)}
		maps.Copy(h, extra)
		return h
	}
	cases := map[string]struct {
		st   fastState
		want []string // in the snapshot
	}{
		"nothing else": {fastState{hash: base(nil)}, []string{
			"lease string", strconv.Quote(rediscore.LoneTag + s(keyFence)), "expires at " + s(keyFence/1000+1) + " ms"}},
		"a live watch": {fastState{hash: base(map[string]string{"watch": s(nowMs + 30000)})}, []string{
			"lease hash", `"watch" = "` + s(nowMs+30000) + `"`, `"fence" = "` + s(keyFence) + `"`, `published "" on "leasehold:{k}:changed"`}},
		"a left try": {fastState{hash: base(map[string]string{"left": s(nowMs + 30000)}), left: map[string]float64{"t1": float64(nowMs + 30000)}}, []string{
			"lease hash", `"left" = "` + s(nowMs+30000) + `"`, `"fence" = "` + s(keyFence) + `"`, `"t1" `}},
		"another's lock delay": {fastState{hash: base(map[string]string{":o": "1 " + s(fence-1) + " " + s(nowMs-1) + "+60000"})}, []string{
			"lease hash", `":o" = "1 ` + s(fence-1) + " " + s(nowMs-1) + `+60000"`, `"fence" = "` + s(keyFence) + `"`}},
	}
	tw := newTwin(t, true)
	for path, src := range map[string]string{"as it is": rediscore.Sources[srcRelease], "general": generalSource(t, srcRelease)} {
		for name, c := range cases {
			got := tw.run(t, now, "k", c.st, src, []any{"h", 0})
			if !strings.Contains(got, "reply 1 ") {
				t.Errorf("%s, %s: the release: %s", path, name, got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("%s, %s: the key after the release has no %s:\n%s", path, name, w, got)
				}
			}
		}
	}
}

// TestNodeFenceAloneGivesEveryLaterGrantAFenceAbove: after a Redlock node's release of its last
// lease in the lease hash leaves the fence alone (a floor a second ahead of the clock), through
// both drivers, the key's next grant, of whatever kind, is above that fence: a lone Mutex try, a
// Semaphore's, one with a lock delay, a waiting one, one whose TTL ends before the clock passes
// the fence, AcquireAbove and RaiseFence with floors below it, and a grant under a watch started
// on the fence alone, whose watcher is told.
func TestNodeFenceAloneGivesEveryLaterGrantAFenceAbove(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c, ctx := raw(t, srv.Addr), context.Background()
	for drv, mk := range drivers(t) {
		node := mk(t, srv.Addr)
		raiser := node.(core.FenceRaiser)
		req := func(key string) core.AcquireRequest {
			return core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute}
		}
		grants := map[string]func(key string, left uint64) (core.AcquireResult, error){
			"a lone try": func(key string, _ uint64) (core.AcquireResult, error) { return node.Acquire(ctx, req(key)) },
			"2 of 3": func(key string, _ uint64) (core.AcquireResult, error) {
				r := req(key)
				r.Permits, r.Limit = 2, 3
				return node.Acquire(ctx, r)
			},
			"a lock delay": func(key string, _ uint64) (core.AcquireResult, error) {
				r := req(key)
				r.LockDelay = time.Second
				return node.Acquire(ctx, r)
			},
			"a wait": func(key string, _ uint64) (core.AcquireResult, error) {
				r := req(key)
				r.Wait = time.Minute
				return node.Acquire(ctx, r)
			},
			"a TTL short of the fence": func(key string, _ uint64) (core.AcquireResult, error) {
				r := req(key)
				r.TTL = 10 * time.Millisecond
				return node.Acquire(ctx, r)
			},
			"AcquireAbove a floor below": func(key string, left uint64) (core.AcquireResult, error) {
				return raiser.AcquireAbove(ctx, req(key), left-1000)
			},
			"RaiseFence to the fence": func(key string, left uint64) (core.AcquireResult, error) {
				return raiser.RaiseFence(ctx, req(key), left)
			},
			"a watch": func(key string, _ uint64) (core.AcquireResult, error) {
				w, err := node.(core.Watcher).Watch(ctx, key)
				if err != nil {
					return core.AcquireResult{}, err
				}
				defer w.Close()
				poll.Until(t, "the watch to be marked", func() bool { return c.Type(ctx, rediscore.Keys(key)[0]).Val() == "hash" })
				for len(w.C()) > 0 {
					<-w.C()
				}
				r, err := node.Acquire(ctx, req(key))
				select {
				case <-w.C():
				case <-time.After(10 * time.Second):
					t.Errorf("%s: the watcher was not told of the grant", key)
				}
				return r, err
			},
		}
		for kind, grant := range grants {
			key := "node:" + drv + ":" + kind
			state := rediscore.Keys(key)[0]
			a := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 2, TTL: time.Minute}
			r, err := raiser.AcquireAbove(ctx, a, uint64(time.Now().Add(time.Second).UnixMicro()))
			if err != nil || !r.Granted {
				t.Fatalf("%s: AcquireAbove: %+v, %v", key, r, err)
			}
			if ok, err := node.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: r.Fence}); !ok || err != nil {
				t.Fatalf("%s: Release: %v, %v", key, ok, err)
			}
			if got, want := c.Get(ctx, state).Val(), rediscore.LoneTag+strconv.FormatUint(r.Fence, 10); got != want {
				t.Fatalf("%s: after the release the key holds %q; want the fence alone, %q", key, got, want)
			}
			next, err := grant(key, r.Fence)
			if err != nil || !next.Granted || next.Fence <= r.Fence {
				t.Errorf("%s: the next grant, by %s: %+v, %v; want one above %d", key, kind, next, err, r.Fence)
			}
		}
	}
}

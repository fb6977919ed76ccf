package goredis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestScriptCallsFollowMovedRedirectsAndRunOnce: on a Cluster whose client believes (nearly)
// every slot is on the first node, each script call on a key of another node is answered MOVED,
// which go-redis follows though the call is not to be sent again after a lost reply: a MOVED
// call did not run. Every acquire, extend and release goes through, alone or pipelined, and the
// nodes run each once.
func TestScriptCallsFollowMovedRedirectsAndRunOnce(t *testing.T) {
	testenv.SkipShort(t, "starts a Redis Cluster")
	t.Parallel()
	addrs := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			// Every node a master (the library is loaded on each), the first one owning all
			// slots but the last two, as a stale map says after a resharding.
			return []redis.ClusterSlot{
				{Start: 0, End: 16381, Nodes: []redis.ClusterNode{{Addr: addrs[0]}}},
				{Start: 16382, End: 16382, Nodes: []redis.ClusterNode{{Addr: addrs[1]}}},
				{Start: 16383, End: 16383, Nodes: []redis.ClusterNode{{Addr: addrs[2]}}},
			}, nil
		},
	})
	t.Cleanup(func() { c.Close() })
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	if _, err := s.Inspect(ctx, "warm-up"); err != nil { // the library on every node
		t.Fatal(err)
	}
	ran := func() (n []int) {
		for _, a := range addrs {
			n = append(n, fcalls(t, a))
		}
		return n
	}
	before := ran()
	const keys = 12 // most on other nodes than the first
	for i := range keys {
		key := fmt.Sprint("moved-", i)
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v", key, res, err)
		}
		if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute}); err != nil {
			t.Fatalf("Extend(%s) = %v", key, err)
		}
		if held, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); !held || err != nil {
			t.Fatalf("Release(%s) = %v, %v; want released (run once, after its redirect)", key, held, err)
		}
	}
	// Queued behind two held calls, so that they go pipelined: a pipeline follows the
	// redirects too.
	const batched = 16
	h := &gateHook{gate: make(chan struct{})}
	c.AddHook(h)
	answers := acquiresQueuedBehindTwo(t, s, h, batched)
	close(h.gate)
	for range batched + 2 {
		if a := <-answers; a.err != nil || !a.res.Granted {
			t.Fatalf("acquire %s: %+v, %v; want granted", a.key, a.res, a.err)
		}
	}
	if len(h.sizes()) == 0 {
		t.Fatal("no pipeline: the queued calls went alone")
	}
	after := ran()
	total, others := 0, 0
	for i := range addrs {
		total += after[i] - before[i]
		if i > 0 {
			others += after[i] - before[i]
		}
	}
	if total != 3*keys+batched+2 {
		t.Errorf("the nodes ran %d FCALLs (%v before, %v after) for %d calls; want each run once", total, before, after, 3*keys+batched+2)
	}
	if others == 0 {
		t.Fatal("no call ran on another node than the first: none was redirected")
	}
}

package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

// raiseKeepsValue puts node 0's fence on key far ahead, then acquires through s (over the
// nodes) with a value: the raise round must keep the value (and the lease of every permit on a
// shared-exclusive key) on every node.
func raiseKeepsValue(t *testing.T, s core.Store, ns []core.Store, above func(req core.AcquireRequest) error) {
	ctx := context.Background()
	for _, limit := range []int{1, core.MaxLimit} {
		key := "raised" + string(rune('a'+limit%26))
		if err := above(core.AcquireRequest{Key: key, Holder: "bump", Permits: 1, Limit: limit, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := ns[0].Release(ctx, core.ReleaseRequest{Key: key, Holder: "bump"}); err != nil {
			t.Fatal(err)
		}
		req := core.AcquireRequest{Key: key, Holder: "w", Permits: limit, Limit: limit, TTL: time.Minute, Value: "v\n1 2 q"}
		res, err := s.Acquire(ctx, req)
		if err != nil || !res.Granted {
			t.Fatalf("limit %d: %+v %v", limit, res, err)
		}
		// A node that answered the raise round after its grace is a straggler, whose grant is
		// released in the background: it may hold nothing, or, until that release lands, its own
		// grant. Every node that holds the lease once the stragglers are settled holds it at the
		// raised fence with its value, and a quorum does.
		settled := func() (holding int, bad []string) {
			for i, n := range ns {
				snap, err := n.Inspect(ctx, key)
				if err != nil || len(snap.Leases) > 1 {
					bad = append(bad, fmt.Sprintf("node %d: %+v %v", i, snap, err))
					continue
				}
				if len(snap.Leases) == 0 {
					continue
				}
				if l := snap.Leases[0]; l.Holder != "w" || l.Value != req.Value || l.Fence != res.Fence || l.Permits != limit {
					bad = append(bad, fmt.Sprintf("node %d: %+v", i, snap))
					continue
				}
				holding++
			}
			return holding, bad
		}
		holding, bad := settled()
		for deadline := time.Now().Add(10 * time.Second); len(bad) > 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond) // polling for the background releases of stragglers
			holding, bad = settled()
		}
		for _, b := range bad {
			t.Errorf("limit %d: after the raise, %s; want w's lease at fence %d with its value, or none", limit, b, res.Fence)
		}
		if holding < len(ns)/2+1 {
			t.Errorf("limit %d: %d of %d nodes hold the raised lease, want a quorum", limit, holding, len(ns))
		}
		snap, err := s.Inspect(ctx, key)
		if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Value != req.Value {
			t.Errorf("limit %d: Redlock Inspect %+v %v", limit, snap, err)
		}
	}
}

func TestRaiseRoundKeepsTheValue(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		ns, ss := nodes(core.SystemClock{}, 3)
		raiseKeepsValue(t, mustNew(t, ss), ss, func(req core.AcquireRequest) error {
			_, err := ns[0].AcquireAbove(context.Background(), req, uint64(time.Now().Add(time.Hour).UnixMicro()))
			return err
		})
	})
	t.Run("redis", func(t *testing.T) {
		_, ss := redisNodes(t, 3)
		raiseKeepsValue(t, mustNew(t, ss), ss, func(req core.AcquireRequest) error {
			fr := ss[0].(interface {
				AcquireAbove(context.Context, core.AcquireRequest, uint64) (core.AcquireResult, error)
			})
			_, err := fr.AcquireAbove(context.Background(), req, uint64(time.Now().Add(time.Hour).UnixMicro()))
			return err
		})
	})
}

// TestRaiseRoundHasItsOwnDeadline: the first round's answers come 90ms into a 100ms
// node timeout, with different fences; the raise round that follows must get a whole node
// timeout of its own, not what is left of the first round's.
func TestRaiseRoundHasItsOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		var mu sync.Mutex
		var raiseLeft []time.Duration
		before := func(ctx context.Context, i int, op string) error {
			switch op {
			case "acquire":
				time.Sleep(90 * time.Millisecond)
			case "raise":
				d, ok := ctx.Deadline()
				mu.Lock()
				if ok {
					raiseLeft = append(raiseLeft, time.Until(d))
				} else {
					raiseLeft = append(raiseLeft, -1)
				}
				mu.Unlock()
				time.Sleep(50 * time.Millisecond) // more than the first round's deadline leaves
			}
			return ctx.Err()
		}
		ns, ss := scriptedNodes(3, before, nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(timeout))
		ctx := context.Background()
		bump := core.AcquireRequest{Key: "k", Holder: "bump", Permits: 1, Limit: 1, TTL: time.Minute}
		if _, err := ns[0].Store.AcquireAbove(ctx, bump, uint64(time.Now().Add(time.Hour).UnixMicro())); err != nil {
			t.Fatal(err)
		}
		if _, err := ns[0].Store.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "bump"}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			t.Fatalf("Acquire: %+v, %v; want granted after a raise", res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(raiseLeft) == 0 {
			t.Fatal("no raise round: the nodes' fences did not differ")
		}
		for _, left := range raiseLeft {
			if left != timeout {
				t.Errorf("a raise call started with %v to its deadline, want a whole node timeout (%v)", left, timeout)
			}
		}
		for i, n := range ns {
			if snap, err := n.Store.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Fence != res.Fence {
				t.Errorf("node %d: %+v, %v; want a's lease at fence %d", i, snap, err, res.Fence)
			}
		}
	})
}

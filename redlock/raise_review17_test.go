package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
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
		// released in the background: it may hold nothing. Every node that holds the lease holds
		// it at the raised fence with its value, and a quorum does.
		holding := 0
		for i, n := range ns {
			snap, err := n.Inspect(ctx, key)
			if err != nil || len(snap.Leases) > 1 {
				t.Errorf("limit %d: node %d after the raise: %+v %v", limit, i, snap, err)
				continue
			}
			if len(snap.Leases) == 0 {
				continue
			}
			if l := snap.Leases[0]; l.Holder != "w" || l.Value != req.Value || l.Fence != res.Fence || l.Permits != limit {
				t.Errorf("limit %d: node %d after the raise: %+v; want w's lease at fence %d with its value", limit, i, snap, res.Fence)
			}
			holding++
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

func TestRaiseRoundKeepsTheValue_review17(t *testing.T) {
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

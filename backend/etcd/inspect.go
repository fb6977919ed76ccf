package etcd

import (
	"cmp"
	"context"
	"slices"

	"github.com/leasehold/leasehold/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Inspect implements core.Store: one read of the key's records, and one question to etcd per
// lease (in parallel) for the time it has left, which etcd counts in whole seconds: a TTL
// reported is at most a second more than the truth, never more than the lease's TTL.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	if err := s.begin(ctx); err != nil {
		return core.Snapshot{}, err
	}
	if err := s.leaves.AwaitKey(ctx, key); err != nil {
		return core.Snapshot{}, s.fail(ctx, "inspect", err)
	}
	k := s.keys(key)
	resp, err := s.c.Get(ctx, k.base, clientv3.WithPrefix())
	if err != nil {
		return core.Snapshot{}, s.fail(ctx, "inspect", err)
	}
	st, err := k.readState(resp.Header.Revision, resp.Kvs)
	if err != nil {
		return core.Snapshot{}, s.fail(ctx, "inspect", err)
	}
	var snap core.Snapshot
	snap.Limit, _ = st.limit()
	var ids []clientv3.LeaseID
	for _, e := range st.leases {
		ids = append(ids, e.lease)
	}
	for h, d := range st.delays {
		if _, ok := st.leases[h]; !ok {
			ids = append(ids, d.lease)
		}
	}
	lives := s.lives(ctx, ids)
	for h, e := range st.leases {
		l, ok := lives[e.lease]
		if !ok {
			continue // gone since the read
		}
		snap.Leases = append(snap.Leases, core.LeaseInfo{Holder: h, Permits: e.permits, Fence: uint64(e.leaseFence()), TTL: l.left(e.ttl), Value: e.value})
	}
	for h, d := range st.delays {
		if _, ok := st.leases[h]; ok {
			continue
		}
		l, ok := lives[d.lease]
		if !ok {
			continue
		}
		snap.Delayed = append(snap.Delayed, core.DelayInfo{Holder: h, Permits: d.permits, Fence: uint64(d.delayFence()), Left: min(l.left(d.ttl+d.delay), d.delay)})
	}
	if err := ctx.Err(); err != nil {
		return core.Snapshot{}, s.fail(ctx, "inspect", err)
	}
	slices.SortFunc(snap.Leases, func(a, b core.LeaseInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	slices.SortFunc(snap.Delayed, func(a, b core.DelayInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	for _, p := range st.line {
		if _, ok := st.leases[p.holder]; !ok {
			snap.Waiters = append(snap.Waiters, core.WaiterInfo{Holder: p.holder, Permits: p.permits, Value: p.value})
		}
	}
	return snap, nil
}

package etcd

import (
	"context"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Release implements core.Store. With nobody in the key's line it is one transaction; with a
// line, a read, an etcd lease for the heads' grants (asked for in parallel with the read when
// the key's last release through the Store met a line) and a transaction that also grants them.
// The etcd leases of the released grant are kept as spares, or revoked in the background.
func (s *Store) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	k := s.keys(req.Key)
	lk, dk := k.of(kindLease, req.Holder), k.of(kindDelay, req.Holder)
	// The lease's fence is its create revision and, in the first byte of its value, its index:
	// a value (never shorter than three bytes) starts with byte i if it is above "i" and below
	// "i+1".
	own := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), ">", 0)}
	if req.Fence != 0 {
		rev, idx := int64(req.Fence>>fenceShift), byte(req.Fence&(1<<fenceShift-1))
		own = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", rev), clientv3.Compare(clientv3.Value(lk), ">", string([]byte{idx}))}
		if idx < 1<<fenceShift-1 {
			own = append(own, clientv3.Compare(clientv3.Value(lk), "<", string([]byte{idx + 1})))
		}
	}
	g := s.prefetch(ctx, req.Key)
	defer g.settle()
	resp, err := s.c.Txn(ctx).If(append(own, clientv3.Compare(clientv3.Version(k.base+string(kindPlace)+"/").WithPrefix(), "=", 0))...).
		Then(clientv3.OpDelete(lk, clientv3.WithPrevKV()), clientv3.OpDelete(dk, clientv3.WithPrevKV())).
		Else(clientv3.OpGet(k.base, clientv3.WithPrefix())).Commit()
	if err != nil {
		return false, s.fail(ctx, "release", err)
	}
	if resp.Succeeded {
		s.lines.note(req.Key, false)
		s.recycle(deletedLeases(resp.Responses[0].GetResponseDeleteRange().PrevKvs, false)...)
		s.recycle(deletedLeases(resp.Responses[1].GetResponseDeleteRange().PrevKvs, true)...)
		return true, nil
	}
	st, err := k.readState(resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return false, s.fail(ctx, "release", err)
	}
	s.lines.note(req.Key, len(st.line) > 0)
	unlock, err := s.locks.lock(ctx, req.Key)
	if err != nil {
		return false, s.fail(ctx, "release", err)
	}
	defer unlock()
	p, _, _, err := s.commitOn(ctx, k, st, g, func(st *state) (*plan, error) {
		return decideRelease(k, st, req), nil
	})
	if err != nil {
		return false, s.fail(ctx, "release", err)
	}
	s.recycle(p.drop...)
	return p.grant, nil
}

// decideRelease decides req against st: the named lease's records go, and the line's head is
// granted if it then fits. plan.grant reports whether the lease was held.
func decideRelease(k keys, st *state, req core.ReleaseRequest) *plan {
	p := &plan{}
	e, ok := st.leases[req.Holder]
	if !ok || (req.Fence != 0 && uint64(e.leaseFence()) != req.Fence) {
		return p
	}
	p.grant = true
	p.cmps = []clientv3.Cmp{unchanged(k, st), clientv3.Compare(clientv3.CreateRevision(k.of(kindLease, req.Holder)), "=", e.create)}
	p.ops = []clientv3.Op{clientv3.OpDelete(k.of(kindLease, req.Holder)), clientv3.OpDelete(k.of(kindDelay, req.Holder))}
	p.drop = st.leasesOf(req.Holder)
	after := *st
	after.leases = without(st.leases, req.Holder)
	after.delays = without(st.delays, req.Holder)
	serveHeads(p, k, &after, after.used(), "")
	return p
}

func without(m map[string]entry, holder string) map[string]entry {
	if _, ok := m[holder]; !ok {
		return m
	}
	c := make(map[string]entry, len(m))
	for h, e := range m {
		if h != holder {
			c[h] = e
		}
	}
	return c
}

// deletedLeases are the etcd leases of the lease records (or, with delays, the delay records) a
// transaction deleted, but for the session lease of an untaken grant of the line.
func deletedLeases(kvs []*mvccpb.KeyValue, delays bool) []spare {
	ids := make([]spare, 0, len(kvs))
	for _, kv := range kvs {
		r, err := decodeRec(kv.Value)
		switch {
		case err != nil || r.untaken:
			continue
		case delays:
			ids = append(ids, spare{clientv3.LeaseID(kv.Lease), seconds(r.ttl + r.delay)})
		default:
			ids = append(ids, spare{clientv3.LeaseID(kv.Lease), seconds(r.ttl)})
		}
	}
	return ids
}

package etcd

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Extend implements core.Store. With the lease's TTL unchanged it is a read and a renewal of its
// etcd leases (two round trips); with another TTL, or for a grant of the line not yet taken, new
// etcd leases and one transaction that moves the records onto them (three). A grant of the line
// moved so leaves the etcd lease it was on to its TTL: the read has the holder's records alone,
// so it cannot tell whether the other grants of its transaction are still on it.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if err := s.begin(ctx); err != nil {
		return core.ExtendResult{}, err
	}
	res, err := s.extend(ctx, req)
	if err != nil {
		return core.ExtendResult{}, s.fail(ctx, "extend", err)
	}
	return res, nil
}

func (s *Store) extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	k := s.keys(req.Key)
	lk, dk := k.of(kindLease, req.Holder), k.of(kindDelay, req.Holder)
	// Each pass that does not answer found the lease moved or gone since its read (a concurrent
	// Extend with another TTL, an idempotent re-acquire, a release, expiry): the next read tells.
	for {
		if err := ctx.Err(); err != nil {
			return core.ExtendResult{}, err
		}
		resp, err := s.c.Txn(ctx).Then(clientv3.OpGet(lk), clientv3.OpGet(dk)).Commit()
		if err != nil {
			return core.ExtendResult{}, err
		}
		st, err := k.readState(resp.Header.Revision, append(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs...))
		if err != nil {
			return core.ExtendResult{}, err
		}
		e, ok := st.leases[req.Holder]
		if !ok {
			return core.ExtendResult{}, core.ErrLost
		}
		res := core.ExtendResult{Permits: e.permits, Fence: uint64(e.leaseFence()), Limit: e.limit, Value: e.value}
		d, delayed := st.delays[req.Holder]
		if !e.untaken && e.ttl == req.TTL {
			// Renewed where it is: etcd restarts each lease's TTL.
			ids := []clientv3.LeaseID{e.lease}
			if delayed {
				ids = append(ids, d.lease)
			}
			if err := s.keepAlive(ctx, ids); err != nil {
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					continue // revoked since the read: the lease expired or was released (the next read finds it gone), or it moved onto new etcd leases
				}
				return core.ExtendResult{}, err
			}
			return res, nil
		}
		mine, err := s.grantLeases(ctx, req.TTL, e.delay)
		if err != nil {
			return core.ExtendResult{}, err
		}
		r := e.rec
		r.ttl, r.untaken = req.TTL, false
		t, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(lk), "=", e.create), clientv3.Compare(clientv3.LeaseValue(lk), "=", e.lease)).
			Then(grantOps(k, req.Holder, r, e.leaseFence(), mine)...).Commit()
		if err != nil {
			if !outcomeUnknown(err) {
				s.recycle(mine.spares()...)
			}
			// Otherwise the records may be on mine now, or may move there still: mine is no
			// spare, and ends at its TTL unless the holder's refreshes renew it.
			return core.ExtendResult{}, err
		}
		if !t.Succeeded {
			s.recycle(mine.spares()...)
			continue // changed since the read: look again
		}
		drop := st.leasesOf(req.Holder)
		if e.untaken {
			// st has the holder's records alone: whether another grant of the line is on the
			// etcd lease its grant was on (the grants of one transaction share it), it cannot
			// tell. That lease is no spare then, and ends at its TTL (nobody renews it).
			drop = slices.DeleteFunc(drop, func(x spare) bool { return x.id == e.lease })
		}
		s.recycle(drop...)
		return res, nil
	}
}

// keepAlive renews etcd leases at once.
func (s *Store) keepAlive(ctx context.Context, ids []clientv3.LeaseID) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			_, errs[i] = s.renew(ctx, id)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

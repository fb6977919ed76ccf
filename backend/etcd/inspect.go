package etcd

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Extend implements core.Store. With the lease's TTL unchanged it is a read and a renewal of its
// etcd leases (two round trips); with another TTL, or for a grant of the line not yet taken, new
// etcd leases and one transaction that moves the records onto them (three).
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
		s.recycle(st.leasesOf(req.Holder)...)
		return res, nil
	}
}

// keepAlive renews etcd leases at once.
func (s *Store) keepAlive(ctx context.Context, ids []clientv3.LeaseID) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			_, errs[i] = s.c.KeepAliveOnce(ctx, id)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Inspect implements core.Store: one read of the key's records, and one question to etcd per
// lease (in parallel) for the time it has left, which etcd counts in whole seconds: a TTL
// reported is at most a second more than the truth, never more than the lease's TTL.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	if err := s.begin(ctx); err != nil {
		return core.Snapshot{}, err
	}
	if err := s.waitLeaving(ctx, key); err != nil {
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

// life is what etcd said of an etcd lease: the whole seconds it had left, and was granted, when
// the Store asked.
type life struct {
	ttl, granted int64
	asked        time.Time
}

// left estimates the time an etcd lease asked for d has left: etcd reports whole seconds,
// rounded down, of a TTL rounded up from d (or raised to its minimum). The estimate is at most a
// second more than the truth, and at most d.
func (l life) left(d time.Duration) time.Duration {
	pad := max(time.Duration(l.granted)*time.Second-d, 0)
	return min(max(time.Duration(l.ttl+1)*time.Second-pad, time.Millisecond), d)
}

// lives asks etcd, in parallel, how long each lease has left; a lease gone or not answered for
// is missing from the result.
func (s *Store) lives(ctx context.Context, ids []clientv3.LeaseID) map[clientv3.LeaseID]life {
	out := make(map[clientv3.LeaseID]life, len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := s.c.TimeToLive(ctx, id)
			if err != nil || r.TTL < 0 {
				return
			}
			mu.Lock()
			out[id] = life{ttl: r.TTL, granted: r.GrantedTTL, asked: time.Now()}
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// maxAsked bounds the leases a refusal asks etcd about for its RetryAfter.
const maxAsked = 16

// retryAfter is core.AcquireResult.RetryAfter for req, refused on st: how long until the leases
// and lock delays in its way have ended, by what etcd says of their leases; 0 if it cannot tell.
func (s *Store) retryAfter(ctx context.Context, st *state, req core.AcquireRequest) time.Duration {
	type closing struct {
		permits int
		lease   clientv3.LeaseID
		d       time.Duration
	}
	var cs []closing
	if d, ok := st.delays[req.Holder]; ok {
		if _, held := st.leases[req.Holder]; !held {
			cs = []closing{{d.permits, d.lease, d.ttl + d.delay}}
		}
	}
	need := 1
	if cs == nil {
		for h, e := range st.leases {
			if d, ok := st.delays[h]; ok {
				cs = append(cs, closing{e.permits, d.lease, d.ttl + d.delay})
			} else {
				cs = append(cs, closing{e.permits, e.lease, e.ttl})
			}
		}
		for h, d := range st.delays {
			if _, ok := st.leases[h]; !ok {
				cs = append(cs, closing{d.permits, d.lease, d.ttl + d.delay})
			}
		}
		need = max(st.used()+req.Permits-req.Limit, 1)
	}
	if len(cs) > maxAsked {
		// Many leases in the way: ask about those of the shortest TTLs only.
		slices.SortFunc(cs, func(a, b closing) int { return cmp.Compare(a.d, b.d) })
		cs = cs[:maxAsked]
	}
	ids := make([]clientv3.LeaseID, len(cs))
	for i, c := range cs {
		ids[i] = c.lease
	}
	lives := s.livesCached(ctx, ids)
	type at struct {
		permits int
		left    time.Duration
	}
	var ends []at
	for _, c := range cs {
		if l, ok := lives[c.lease]; ok {
			ends = append(ends, at{c.permits, max(l.left(c.d)-time.Since(l.asked), time.Millisecond)})
		} else {
			ends = append(ends, at{c.permits, time.Millisecond}) // ended since the read
		}
	}
	slices.SortFunc(ends, func(a, b at) int { return cmp.Compare(a.left, b.left) })
	for _, e := range ends {
		if need -= e.permits; need <= 0 {
			return e.left
		}
	}
	return 0
}

// livesCached is lives, but answers from what etcd said before, while that answer has not run
// out. A lease renewed since lives longer than such an answer says, never shorter: an answer
// from the cache is a lower bound, as RetryAfter must be (a waiter that asks again too early is
// refused and told again). The cache keeps at most a few thousand answers.
func (s *Store) livesCached(ctx context.Context, ids []clientv3.LeaseID) map[clientv3.LeaseID]life {
	out := make(map[clientv3.LeaseID]life, len(ids))
	var ask []clientv3.LeaseID
	s.mu.Lock()
	for _, id := range ids {
		if l, ok := s.lifeCache[id]; ok && time.Since(l.asked) < time.Duration(l.ttl)*time.Second {
			out[id] = l
		} else {
			ask = append(ask, id)
		}
	}
	s.mu.Unlock()
	if len(ask) == 0 {
		return out
	}
	got := s.lives(ctx, ask)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lifeCache)+len(got) > 4096 {
		for id, l := range s.lifeCache {
			if time.Since(l.asked) >= time.Duration(l.ttl)*time.Second {
				delete(s.lifeCache, id)
			}
		}
		if len(s.lifeCache)+len(got) > 4096 {
			clear(s.lifeCache)
		}
	}
	for id, l := range got {
		out[id] = l
		s.lifeCache[id] = l
	}
	return out
}

package etcd

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Release implements core.Store. With nobody in the key's line it is one transaction; with a
// line, a read, an etcd lease for the head's grant and a transaction that also grants it. The
// etcd leases of the released grant are revoked in the background.
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
	resp, err := s.c.Txn(ctx).If(append(own, clientv3.Compare(clientv3.Version(k.base+string(kindPlace)+"/").WithPrefix(), "=", 0))...).
		Then(clientv3.OpDelete(lk, clientv3.WithPrevKV()), clientv3.OpDelete(dk, clientv3.WithPrevKV())).
		Else(clientv3.OpGet(k.base, clientv3.WithPrefix())).Commit()
	if err != nil {
		return false, s.fail(ctx, "release", err)
	}
	if resp.Succeeded {
		s.recycle(deletedLeases(resp.Responses[0].GetResponseDeleteRange().PrevKvs, false)...)
		s.recycle(deletedLeases(resp.Responses[1].GetResponseDeleteRange().PrevKvs, true)...)
		return true, nil
	}
	st, err := k.readState(resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return false, s.fail(ctx, "release", err)
	}
	unlock, err := s.lockKey(ctx, req.Key)
	if err != nil {
		return false, s.fail(ctx, "release", err)
	}
	defer unlock()
	p, _, _, err := s.commit(ctx, k, st, func(st *state) (*plan, error) {
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

// decideLeave takes holder's place out of the line, gives back a grant the line made it that it
// has not taken (as if released: no lock delay), and grants the head if it then fits.
// plan.grant reports whether there was anything to leave.
func decideLeave(k keys, st *state, holder string) *plan {
	p := &plan{cmps: []clientv3.Cmp{unchanged(k, st)}}
	after := *st
	if pl, ok := st.place(holder); ok {
		p.grant = true
		p.ops = append(p.ops, clientv3.OpDelete(k.of(kindPlace, holder)))
		p.cmps = append(p.cmps, clientv3.Compare(clientv3.CreateRevision(k.of(kindPlace, holder)), "=", pl.create))
		after.line = nil
		for _, q := range st.line {
			if q.holder != holder {
				after.line = append(after.line, q)
			}
		}
	}
	if e, ok := st.leases[holder]; ok && e.untaken {
		p.grant = true
		p.ops = append(p.ops, clientv3.OpDelete(k.of(kindLease, holder)), clientv3.OpDelete(k.of(kindDelay, holder)))
		p.cmps = append(p.cmps, clientv3.Compare(clientv3.CreateRevision(k.of(kindLease, holder)), "=", e.create))
		p.drop = append(p.drop, st.leasesOf(holder)...)
		after.leases = without(st.leases, holder)
		after.delays = without(st.delays, holder)
	}
	if !p.grant {
		return &plan{}
	}
	serveHeads(p, k, &after, after.used(), holder)
	return p
}

// leave runs decideLeave until it commits, and reports whether it found anything to leave.
func (s *Store) leave(ctx context.Context, key, holder string) (bool, error) {
	k := s.keys(key)
	unlock, err := s.lockKey(ctx, key)
	if err != nil {
		return false, err
	}
	defer unlock()
	st := s.seen(key)
	if st == nil {
		resp, err := s.c.Get(ctx, k.base, clientv3.WithPrefix())
		if err != nil {
			return false, err
		}
		if st, err = k.readState(resp.Header.Revision, resp.Kvs); err != nil {
			return false, err
		}
	}
	p, _, _, err := s.commit(ctx, k, st, func(st *state) (*plan, error) { return decideLeave(k, st, holder), nil })
	if err != nil {
		return false, err
	}
	s.recycle(p.drop...)
	return p.grant, nil
}

// pending counts the leaves a Store owes on one key, or of one holder on it: Inspect waits for
// the former, and the holder's tries for the latter.
type pending struct {
	n    int
	done chan struct{}
}

// leaveInBackground leaves holder's place on key in the background; again after a second when
// late is set and it found nothing then, for a try whose transaction may still arrive.
func (s *Store) leaveInBackground(key, holder string, late bool) {
	id := refusalID(key, holder)
	s.mu.Lock()
	pd, byHolder := s.leaving[key], s.leavingBy[id]
	if pd == nil {
		pd = &pending{done: make(chan struct{})}
		s.leaving[key] = pd
	}
	if byHolder == nil {
		byHolder = &pending{done: make(chan struct{})}
		s.leavingBy[id] = byHolder
	}
	pd.n++
	byHolder.n++
	s.mu.Unlock()
	s.goBackgroundFor(leaveBudget, func(ctx context.Context) {
		defer s.doneLeaving(key, id, pd, byHolder)
		found, err := s.leaveAgain(ctx, key, holder)
		if err != nil || found || !late {
			return
		}
		select {
		case <-time.After(time.Second):
			s.leaveAgain(ctx, key, holder)
		case <-ctx.Done():
		}
	})
}

// leaveBudget bounds how long a Store goes on trying to leave a place it owes: a place left
// behind holds up the line (and takes the grants it is made) while the Store's session lives.
const leaveBudget = 2 * time.Minute

// leaveAgain is leave, tried again (each try within ten seconds, 100 ms to 2 s apart) while
// etcd cannot be reached, until ctx ends: a leave cut off in flight must not leave its place.
func (s *Store) leaveAgain(ctx context.Context, key, holder string) (bool, error) {
	backoff := 100 * time.Millisecond
	for {
		try, cancel := context.WithTimeout(ctx, 10*time.Second)
		found, err := s.leave(try, key, holder)
		cancel()
		if err == nil || ctx.Err() != nil {
			return found, err
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 2*time.Second)
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

func (s *Store) doneLeaving(key string, id placeID, pd, byHolder *pending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pd.n--; pd.n == 0 {
		close(pd.done)
		if s.leaving[key] == pd {
			delete(s.leaving, key)
		}
	}
	if byHolder.n--; byHolder.n == 0 {
		close(byHolder.done)
		if s.leavingBy[id] == byHolder {
			delete(s.leavingBy, id)
		}
	}
}

// waitLeaving waits for the leaves the Store owes on key.
func (s *Store) waitLeaving(ctx context.Context, key string) error {
	s.mu.Lock()
	pd := s.leaving[key]
	s.mu.Unlock()
	return pd.wait(ctx)
}

// waitHolderLeaving waits for the leaves the Store owes of holder on key, so that a try sent
// after them keeps the place it takes and the grant the line makes it: a leave takes out
// whatever place and untaken grant the holder has.
func (s *Store) waitHolderLeaving(ctx context.Context, key, holder string) error {
	s.mu.Lock()
	pd := s.leavingBy[refusalID(key, holder)]
	s.mu.Unlock()
	return pd.wait(ctx)
}

// wait waits until the leaves counted in pd, if any, have ended, or ctx ends.
func (pd *pending) wait(ctx context.Context) error {
	if pd == nil {
		return nil
	}
	select {
	case <-pd.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) leaveAfterError(key, holder string) { s.leaveInBackground(key, holder, true) }

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

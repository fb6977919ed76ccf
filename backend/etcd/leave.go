package etcd

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
	unlock, err := s.locks.lock(ctx, key)
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

// leaveInBackground leaves holder's place on key in the background, as waitline.Leaves sends it;
// again after a second when late is set and it found nothing then, for a try whose transaction
// may still arrive. Once the Store's background work has ended it does nothing. A leave that
// cannot be sent within its budget is started again leaveRetry later, and so on while the Store
// lives, unless the holder's Waiter is open then or a later try of it set the end of its own
// Wait: the place it would leave behind lives on the Store's session, and so would a grant the
// line made it, holding up the key.
func (s *Store) leaveInBackground(key, holder string, late bool) {
	id := refusalID(key, holder)
	end := s.waitEnds.get(id)
	answered := false
	s.leaves.Start(waitline.Leave{Key: key, Holder: holder, Send: func(ctx context.Context) error {
		found, err := s.leave(ctx, key, holder)
		if err != nil {
			return err
		}
		if !found && late {
			late = false
			t := time.NewTimer(time.Second)
			defer t.Stop()
			select {
			case <-t.C:
				if _, err := s.leave(ctx, key, holder); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		answered = true
		s.waitEnds.stopIf(id, end) // answered: the place is left
		return nil
	}, After: func() {
		if !answered {
			s.waitEnds.setIf(id, end, leaveRetry, s.leaveUnlessWaiting(key, holder))
		}
	}})
}

// leaveRetry is how long after a leave that went unanswered within its budget the Store leaves
// again.
const leaveRetry = time.Second

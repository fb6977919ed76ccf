package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leases are the etcd leases of one grant: the lease's own (TTL) and, with a lock delay, its
// delay record's (TTL + delay), with the whole seconds each was asked for.
type leases struct {
	own, delay         clientv3.LeaseID
	ownSecs, delaySecs int64
}

// spares are l's leases, to recycle once no record is on them.
func (l leases) spares() []spare {
	return []spare{{l.own, l.ownSecs}, {l.delay, l.delaySecs}}
}

// grantLeases returns the etcd leases of a grant of ttl with a lock delay: spares of the Store's
// of the same TTL, renewed, or new ones.
func (s *Store) grantLeases(ctx context.Context, ttl, delay time.Duration) (leases, error) {
	l := leases{ownSecs: seconds(ttl)}
	var err error
	if l.own, err = s.lease(ctx, l.ownSecs); err != nil {
		return leases{}, err
	}
	if delay > 0 {
		l.delaySecs = seconds(ttl + delay)
		if l.delay, err = s.lease(ctx, l.delaySecs); err != nil {
			s.recycle(spare{l.own, l.ownSecs})
			return leases{}, err
		}
	}
	return l, nil
}

// grantOps are the writes that grant r to holder on leases l, as a new lease or over the one the
// holder has (whose create revision the write keeps, and fence, the lease's fence, then says),
// and take its place out of the line. r.idx is the grant's index among its transaction's grants.
func grantOps(k keys, holder string, r rec, fence int64, l leases) []clientv3.Op {
	r.fence = 0
	if fence != 0 {
		r.idx = uint8(fence & (1<<fenceShift - 1)) // the record's create revision stays; so must its index
	}
	ops := []clientv3.Op{clientv3.OpPut(k.of(kindLease, holder), r.encode(), clientv3.WithLease(l.own))}
	if l.delay != 0 {
		d := rec{permits: r.permits, limit: r.limit, ttl: r.ttl, delay: r.delay, fence: fence}
		if fence == 0 {
			d.fence = int64(r.idx)
		}
		ops = append(ops, clientv3.OpPut(k.of(kindDelay, holder), d.encode(), clientv3.WithLease(l.delay)))
	} else {
		ops = append(ops, clientv3.OpDelete(k.of(kindDelay, holder)))
	}
	return append(ops, clientv3.OpDelete(k.of(kindPlace, holder)))
}

// plan is what one decision against a key's state writes, and what it answers.
type plan struct {
	cmps  []clientv3.Cmp
	ops   []clientv3.Op
	heads []entry // the places the line grants in the same transaction
	drop  []spare // leases no record is on once the transaction commits
	fence int64   // the caller's grant's fence; 0: the transaction's revision
	grant bool    // the caller is granted
	place bool    // the caller's place in the line is written
	res   core.AcquireResult
}

// unchanged is the comparison that a transaction decided on st is still current: no record of
// the key was written since. A record deleted since (released, expired) is not caught, and need
// not be: it only makes the decision more cautious, and the waiters' watches see it.
func unchanged(k keys, st *state) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(k.base).WithPrefix(), "<", st.rev+1)
}

// serveHeads adds to p the grants of the line's heads, from the head on while each one's
// permits fit once the writes of p are done (used is the permits held then), at most maxGrants,
// passing over except's place.
func serveHeads(p *plan, k keys, st *state, used int, except string) {
	for _, h := range st.line {
		if _, ok := st.leases[h.holder]; ok || h.holder == except {
			continue
		}
		if _, delayed := st.delays[h.holder]; delayed || used+h.permits > h.limit || len(p.heads) == maxGrants {
			return
		}
		used += h.permits
		p.heads = append(p.heads, h)
		p.cmps = append(p.cmps, clientv3.Compare(clientv3.CreateRevision(k.of(kindPlace, h.holder)), "=", h.create))
	}
}

// Acquire implements core.Store. A grant costs two round trips (an etcd lease, then one
// transaction), and two more when the key changed under the first: a read and a transaction. A
// refusal also asks etcd how long the leases in the way have left, in parallel. Acquire first
// waits for the leaves of req.Holder's earlier tries and Waiters on req.Key this Store still
// owes, or until ctx ends, which it then returns having sent nothing: a leave run after the
// try would take out the place it took or give back the grant the line made it. Leaves owed by
// another Store under the same holder id are not waited for.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	if err := s.begin(ctx); err != nil {
		return core.AcquireResult{}, err
	}
	// A leave of the holder's earlier try or Waiter on the key, run after this try, would take
	// out the place it keeps or takes, or give back the grant the line makes it.
	if err := s.waitHolderLeaving(ctx, req.Key, req.Holder); err != nil {
		return core.AcquireResult{}, s.fail(ctx, "acquire", err)
	}
	res, err := s.acquire(ctx, req)
	if errors.Is(err, errSessionLost) || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The place went to a session lease etcd had ended before the Store noticed, or the
		// grant's own etcd lease ended before its transaction (a stall longer than the TTL):
		// once more, on a new session and new leases.
		res, err = s.acquire(ctx, req)
	}
	if err != nil {
		if req.Wait > 0 && !errors.Is(err, core.ErrLimitMismatch) && !errors.Is(err, core.ErrInvalid) {
			// It may have taken a place, now or when it arrives late; its caller will not
			// Register, so the Store leaves for it. A refusal as invalid or as a limit mismatch
			// was decided on a read and wrote nothing: the place and grant the holder has stay.
			s.leaveAfterError(req.Key, req.Holder)
		}
		return core.AcquireResult{}, s.fail(ctx, "acquire", err)
	}
	return res, nil
}

func (s *Store) acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	k := s.keys(req.Key)
	var mine leases // the etcd leases of a grant to the caller, asked for once it is to be granted
	used := false
	// A transaction that wrote the caller's grant on mine failed without an answer: it may have
	// committed, or may still commit. mine is never a spare then: a grant of the holder's
	// that it renews (held) stays on it, to its TTL; any other is ended (discard), for its caller
	// is told that it failed and no etcd lease may carry two grants.
	unsure, held := false, false
	defer func() {
		switch {
		case used:
		case !unsure:
			s.recycle(mine.spares()...)
		case req.Unshared && !held:
			s.discard(mine)
		default:
			// Left to its TTL: a lease of a holder id shared with others may be theirs to
			// renew (a re-grant), or to give back; nothing renews it otherwise.
		}
	}()
	r := rec{permits: req.Permits, limit: req.Limit, ttl: req.TTL, delay: req.LockDelay, value: req.Value}
	if g, ok := s.untaken(req.Key, req.Holder); ok && g.permits == req.Permits && g.limit == req.Limit {
		// The Store's watch saw the line grant the caller: it is taken in one transaction on
		// the caller's own etcd leases, with no read and without waiting for the Store's other
		// operations on the key, as long as it is still as seen.
		var err error
		if mine, err = s.grantLeases(ctx, req.TTL, req.LockDelay); err != nil {
			return core.AcquireResult{}, err
		}
		lk := k.of(kindLease, req.Holder)
		resp, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(lk), "=", g.create), clientv3.Compare(clientv3.LeaseValue(lk), "=", int64(g.lease))).
			Then(grantOps(k, req.Holder, r, g.fence, mine)...).Commit()
		if err != nil {
			unsure = outcomeUnknown(err)
			return core.AcquireResult{}, err
		}
		if resp.Succeeded {
			used = true
			s.revoke(g.delayLease) // g.lease is the waiter's session
			return core.AcquireResult{Granted: true, Fence: uint64(g.fence)}, nil
		}
	}
	st := s.seen(req.Key)
	if st == nil {
		// Nothing on the key, as far as the Store knows: the grant is one transaction, its
		// fence the transaction's revision.
		if mine.own == 0 {
			var err error
			if mine, err = s.grantLeases(ctx, req.TTL, req.LockDelay); err != nil {
				return core.AcquireResult{}, err
			}
			if afterGrantHook != nil {
				afterGrantHook()
			}
		}
		resp, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.Version(k.base).WithPrefix(), "=", 0)).
			Then(grantOps(k, req.Holder, r, 0, mine)...).
			Else(clientv3.OpGet(k.base, clientv3.WithPrefix())).Commit()
		if err != nil {
			unsure = outcomeUnknown(err)
			return core.AcquireResult{}, err
		}
		if resp.Succeeded {
			used = true
			return core.AcquireResult{Granted: true, Fence: uint64(resp.Header.Revision << fenceShift)}, nil
		}
		if st, err = k.readState(resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs); err != nil {
			return core.AcquireResult{}, err
		}
	} else if p, err := decideAcquire(k, st, req); err == nil && p.grant && mine.own == 0 {
		// The Store's watch keeps the key's records: the decision starts from them, with no
		// read, and its etcd leases are asked for before the Store's turn on the key.
		if mine, err = s.grantLeases(ctx, req.TTL, req.LockDelay); err != nil {
			return core.AcquireResult{}, err
		}
	}
	unlock, err := s.lockKey(ctx, req.Key)
	if err != nil {
		return core.AcquireResult{}, err
	}
	defer unlock()
	var sess clientv3.LeaseID
	granting := false // the last decision wrote the caller's grant on mine
	p, resp, st, err := s.commit(ctx, k, st, func(st *state) (*plan, error) {
		p, err := decideAcquire(k, st, req)
		if err != nil {
			granting = false
			return nil, err
		}
		granting = p.grant
		if p.grant {
			e, ok := st.leases[req.Holder]
			held = ok && !e.untaken
			if mine.own == 0 {
				if mine, err = s.grantLeases(ctx, req.TTL, req.LockDelay); err != nil {
					return nil, err
				}
			}
			p.ops = append(p.ops, grantOps(k, req.Holder, r, p.fence, mine)...)
		}
		if p.place {
			if sess == 0 {
				if sess, err = s.session(ctx); err != nil {
					return nil, err
				}
			}
			if pl, ok := st.place(req.Holder); !ok || pl.lease != sess || pl.rec != r {
				// A place already as asked is not written again: the write would only fail the
				// others' transactions and wake the Store's waiters for nothing.
				p.ops = append(p.ops, clientv3.OpPut(k.of(kindPlace, req.Holder), r.encode(), clientv3.WithLease(sess)))
			}
		}
		return p, nil
	})
	if err != nil {
		var sent *txnError
		unsure = granting && errors.As(err, &sent) && outcomeUnknown(err)
		if sess != 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.forgetSession(sess)
			return core.AcquireResult{}, errSessionLost
		}
		return core.AcquireResult{}, err
	}
	if resp != nil {
		s.recycle(p.drop...)
	}
	if p.grant {
		used = true
		fence := p.fence
		if fence == 0 {
			fence = resp.Header.Revision << fenceShift
		}
		return core.AcquireResult{Granted: true, Fence: uint64(fence)}, nil
	}
	if req.Wait > 0 && resp != nil {
		seed := st
		if p.place {
			if after, err := k.readState(resp.Header.Revision, resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs); err == nil {
				seed = after
			}
		}
		s.noteRefusal(req, seed, resp.Header.Revision)
		s.leaveWhenWaitEnds(req)
	}
	res := p.res
	res.RetryAfter = s.retryAfter(ctx, st, req)
	return res, nil
}

// txnError is the error of a transaction commit sent: unless etcd refused it, it may have
// committed, or may still commit.
type txnError struct{ err error }

func (e *txnError) Error() string { return e.err.Error() }
func (e *txnError) Unwrap() error { return e.err }

// outcomeUnknown reports whether a transaction that failed with err may have committed, or may
// still: anything but etcd's refusal of a lease it does not have (which it checks before
// applying anything).
func outcomeUnknown(err error) bool { return !errors.Is(err, rpctypes.ErrLeaseNotFound) }

// afterGrantHook, set by a test, runs after a try's etcd leases are granted, before they are
// used: a stall there longer than the TTL ends them first.
var afterGrantHook func()

// errSessionLost says that a try put its place on a session lease etcd no longer has.
var errSessionLost = errors.New("etcd: the Store's session lease ended")

// decideAcquire decides req against st. A plan that grants the caller has no writes of the grant
// yet: they go on etcd leases the caller asks for then (grantOps, with plan.fence).
func decideAcquire(k keys, st *state, req core.AcquireRequest) (*plan, error) {
	if held, busy := st.limit(); busy && held != req.Limit {
		return nil, &core.LimitMismatchError{Held: held, Requested: req.Limit}
	}
	p := &plan{}
	if e, ok := st.leases[req.Holder]; ok {
		if e.permits != req.Permits {
			return nil, fmt.Errorf("%w: holder already holds %d permits, asked for %d", core.ErrInvalid, e.permits, req.Permits)
		}
		// Granted again (or a grant of the line, taken): the same fence, a new expiry. The
		// compare on the etcd lease too: a concurrent re-grant that moved the records onto
		// leases of its own makes this one decide again, so that it revokes those.
		p.grant, p.fence = true, e.leaseFence()
		lk := k.of(kindLease, req.Holder)
		p.cmps = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", e.create), clientv3.Compare(clientv3.LeaseValue(lk), "=", int64(e.lease))}
		p.drop = st.leasesOf(req.Holder)
		return p, nil
	}
	p.cmps = []clientv3.Cmp{unchanged(k, st)}
	used := st.used()
	_, delayed := st.delays[req.Holder]
	if !delayed && !st.ahead(req.Holder) && used+req.Permits <= req.Limit {
		p.grant = true
		return p, nil
	}
	if req.Wait > 0 {
		p.place = true
		serveHeads(p, k, st, used, req.Holder)
	}
	return p, nil
}

// commit decides against the key's records st, writes the decision in one
// transaction that holds only if the key's records are as decided on, and decides again on the
// state a failed transaction returns, until one commits or nothing needs writing. It returns the
// plan, the transaction's response (nil when nothing was written) and the state decided on.
func (s *Store) commit(ctx context.Context, k keys, st *state, decide func(*state) (*plan, error)) (*plan, *clientv3.TxnResponse, *state, error) {
	gone := 0 // tries that met a head's ended session
	for {
		p, err := decide(st)
		if st.seen && (err != nil || len(p.ops) == 0 && len(p.heads) == 0) {
			// A decision to write nothing, or a refusal as an error (a limit mismatch, permits
			// other than those held), is checked by no transaction: it must be taken on the
			// records as they are, not as the watch last saw them (a release that returned
			// before the request began may not be in the copy yet).
			resp, err := s.c.Get(ctx, k.base, clientv3.WithPrefix())
			if err != nil {
				return nil, nil, st, err
			}
			if st, err = k.readState(resp.Header.Revision, resp.Kvs); err != nil {
				return nil, nil, nil, err
			}
			continue
		}
		if err != nil {
			return nil, nil, st, err
		}
		if len(p.ops) == 0 && len(p.heads) == 0 {
			return p, nil, st, nil // nothing to write: a refusal without a wait, a release of nothing
		}
		// Each head's grant is on the session lease its place is on (the compare on the place
		// holds it there): a waiter that dies before taking it takes it along. Its lock delay
		// begins when it is taken.
		for i, h := range p.heads {
			g := h.rec
			g.untaken, g.idx = true, uint8(i)
			p.ops = append(p.ops, grantOps(k, h.holder, g, 0, leases{own: h.lease})...)
		}
		ops := p.ops
		if p.place {
			// The records as this transaction leaves them, for the waiter's watch to start from
			// its revision: a watch from an earlier revision is caught up by etcd only every
			// 100 ms, and a release in between would reach the waiter that late.
			ops = append(ops[:len(ops):len(ops)], clientv3.OpGet(k.base, clientv3.WithPrefix()))
		}
		resp, err := s.c.Txn(ctx).If(p.cmps...).Then(ops...).Else(clientv3.OpGet(k.base, clientv3.WithPrefix())).Commit()
		if err != nil && len(p.heads) > 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) && gone < 20 {
			// A head's session ended and etcd is about to delete its place (it revokes ended
			// leases twice a second): read again shortly, and serve the line without it.
			gone++
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return nil, nil, st, ctx.Err()
			}
			r, err := s.c.Get(ctx, k.base, clientv3.WithPrefix())
			if err != nil {
				return nil, nil, st, err
			}
			if st, err = k.readState(r.Header.Revision, r.Kvs); err != nil {
				return nil, nil, nil, err
			}
			continue
		}
		if err != nil {
			return nil, nil, st, &txnError{err}
		}
		if resp.Succeeded {
			return p, resp, st, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, st, err
		}
		if st, err = k.readState(resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs); err != nil {
			return nil, nil, nil, err
		}
	}
}

// ahead reports whether a live place is ahead of holder's in the line (or anywhere in it, when
// holder has none).
func (st *state) ahead(holder string) bool {
	for _, p := range st.line {
		if p.holder == holder {
			return false
		}
		if _, ok := st.leases[p.holder]; !ok {
			return true
		}
	}
	return false
}

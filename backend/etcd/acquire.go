package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
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

// puts returns the puts of ops: on a key with no records, its deletes would find nothing.
func puts(ops []clientv3.Op) []clientv3.Op {
	return slices.DeleteFunc(ops, func(op clientv3.Op) bool { return !op.IsPut() })
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
	// A leave of the holder's earlier try or waiter on the key, run after this try, would take
	// out the place it keeps or takes, or give back the grant the line makes it.
	if err := s.leaves.AwaitHolder(ctx, req.Key, req.Holder); err != nil {
		return core.AcquireResult{}, s.fail(ctx, "acquire", err)
	}
	res, err := s.acquire(ctx, req, false)
	if errors.Is(err, errSessionLost) || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The place went to a session lease etcd had ended before the Store noticed, or the
		// grant's own etcd lease ended before its transaction (a stall longer than the TTL, or
		// a spare etcd had ended, its renewal sent beside the transaction): once more, on a new
		// session and new leases, each spare renewed before it is used.
		res, err = s.acquire(ctx, req, true)
	}
	if err != nil {
		if req.Wait > 0 && !errors.Is(err, core.ErrLimitMismatch) && !errors.Is(err, core.ErrInvalid) {
			// It may have taken a place, now or when it arrives late; its caller will not
			// Register, so the Store leaves for it. A refusal as invalid or as a limit mismatch
			// was decided on a read and wrote nothing: the place and grant the holder has stay.
			s.leaveInBackground(req.Key, req.Holder, true)
		}
		return core.AcquireResult{}, s.fail(ctx, "acquire", err)
	}
	return res, nil
}

// acquireTry is one pass of Acquire over the key's records: the request, and the etcd leases it
// asked for, with what became of them.
type acquireTry struct {
	s   *Store
	req core.AcquireRequest
	k   keys
	r   rec // the record of the caller's grant or place

	mine leases // the etcd leases of a grant to the caller, asked for once it is to be granted
	used bool   // mine carries the caller's grant
	// A transaction that wrote the caller's grant on mine failed without an answer: it may have
	// committed, or may still commit. mine is never a spare then: a grant of the holder's
	// that it renews (held) stays on it, to its TTL; any other is ended (discard), for its caller
	// is told that it failed and no etcd lease may carry two grants.
	unsure, held bool
	granting     bool             // the last decision wrote the caller's grant on mine
	sess         clientv3.LeaseID // the session lease the caller's place went on; 0 before
	// confirm waits for the renewal of the spare mine.own is, sent beside the transaction that
	// uses it (leasesSoon); nil when there is none to wait for.
	confirm func(context.Context) error
	// renewFirst has leasesSoon renew a spare before its transaction, passing over those etcd
	// has ended (a try again after one was).
	renewFirst bool
}

// leasesSoon asks for the grant's etcd leases as grantLeases does; without a lock delay (and
// unless renewFirst), a spare's renewal is only sent, to travel beside the transaction that uses
// it, and confirmed waits for it.
func (t *acquireTry) leasesSoon(ctx context.Context) error {
	if t.req.LockDelay > 0 || t.renewFirst {
		var err error
		t.mine, err = t.s.grantLeases(ctx, t.req.TTL, t.req.LockDelay)
		return err
	}
	secs := seconds(t.req.TTL)
	id, confirm, err := t.s.leaseSoon(ctx, secs)
	if err != nil {
		return err
	}
	t.mine, t.confirm = leases{own: id, ownSecs: secs}, confirm
	return nil
}

// failed notes what a transaction that would grant on mine and failed with err leaves of mine:
// nothing when etcd had ended a lease of it (a spare taken with its renewal still on its way);
// a grant of unknown outcome when err says nothing of it.
func (t *acquireTry) failed(err error) {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.mine = leases{} // one ended; the other, if any, ends at its TTL
		return
	}
	t.unsure = outcomeUnknown(err)
}

// confirmed waits for the renewal leasesSoon sent, once the transaction that used mine is
// answered; granted reports whether it wrote the caller's grant on mine. A renewal that failed
// makes mine no spare: etcd had ended it (and any record on it), or may end it before its TTL.
// Only a grant it carries fails then: with an error wrapping rpctypes.ErrLeaseNotFound in the
// first case (Acquire tries once more), and as a grant of unknown outcome in the second.
func (t *acquireTry) confirmed(ctx context.Context, granted bool) error {
	confirm := t.confirm
	if confirm == nil {
		return nil
	}
	t.confirm = nil
	err := confirm(ctx)
	switch {
	case err == nil:
		return nil
	case !granted || errors.Is(err, rpctypes.ErrLeaseNotFound):
		t.mine = leases{} // ends at its TTL, if it has not
	default:
		t.unsure = true
	}
	if !granted {
		return nil
	}
	return err
}

// acquire is one try of Acquire; renewFirst has a spare renewed before the transaction that
// grants on it rather than beside it.
func (s *Store) acquire(ctx context.Context, req core.AcquireRequest, renewFirst bool) (core.AcquireResult, error) {
	t := &acquireTry{s: s, req: req, k: s.keys(req.Key), renewFirst: renewFirst,
		r: rec{permits: req.Permits, limit: req.Limit, ttl: req.TTL, delay: req.LockDelay, value: req.Value}}
	defer t.settle()
	if res, done, err := t.takeSeen(ctx); done {
		return res, err
	}
	st, res, done, err := t.start(ctx)
	if done {
		return res, err
	}
	return t.decide(ctx, st)
}

// settle keeps, ends or leaves to their TTL the etcd leases the try asked for and did not use.
func (t *acquireTry) settle() {
	switch {
	case t.used:
	case !t.unsure:
		t.s.recycle(t.mine.spares()...)
	case t.req.Unshared && !t.held:
		t.s.discard(t.mine)
	default:
		// Left to its TTL: a lease of a holder id shared with others may be theirs to
		// renew (a re-grant), or to give back; nothing renews it otherwise.
	}
}

// takeSeen takes the grant of the line to the caller that the Store's watch saw, if it saw one
// made on the request asked now (waitline.Same): in one transaction on the caller's own etcd
// leases, with no read and without waiting for the Store's other operations on the key, as long
// as it is still as seen. done reports whether it
// answered: granted, or failed.
func (t *acquireTry) takeSeen(ctx context.Context) (res core.AcquireResult, done bool, err error) {
	req := t.req
	g, ok := t.s.untaken(req.Key, req.Holder)
	if !ok || !waitline.Same(g.rec.request(req), t.r.request(req)) {
		return core.AcquireResult{}, false, nil
	}
	if err = t.leasesSoon(ctx); err != nil {
		return core.AcquireResult{}, true, err
	}
	lk := t.k.of(kindLease, req.Holder)
	resp, err := t.s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(lk), "=", g.create), clientv3.Compare(clientv3.LeaseValue(lk), "=", int64(g.lease))).
		Then(grantOps(t.k, req.Holder, t.r, g.fence, t.mine)...).Commit()
	if err != nil {
		t.failed(err)
		return core.AcquireResult{}, true, err
	}
	if err := t.confirmed(ctx, resp.Succeeded); err != nil {
		return core.AcquireResult{}, true, err
	}
	if !resp.Succeeded {
		return core.AcquireResult{}, false, nil
	}
	t.used = true
	t.s.revoke(g.delayLease)
	if g.sole {
		t.s.recycle(spare{g.lease, g.life}) // the grant's own etcd lease, no record on it now
	}
	return core.AcquireResult{Granted: true, Fence: uint64(g.fence)}, true, nil
}

// start returns the key's records to decide on. With the Store's watch's copy, the decision
// starts from it, with no read, and the grant's etcd leases are asked for before the Store's
// turn on the key. Without one (nothing on the key, as far as the Store knows) the grant is
// tried as one transaction, its fence the transaction's revision, which returns the records
// when it fails. done reports whether it answered: granted, or failed.
func (t *acquireTry) start(ctx context.Context) (st *state, res core.AcquireResult, done bool, err error) {
	req := t.req
	if st = t.s.seen(req.Key); st != nil {
		if p, err := decideAcquire(t.k, st, req); err == nil && p.grant && t.mine.own == 0 {
			if t.mine, err = t.s.grantLeases(ctx, req.TTL, req.LockDelay); err != nil {
				return nil, core.AcquireResult{}, true, err
			}
		}
		return st, core.AcquireResult{}, false, nil
	}
	if t.mine.own == 0 {
		if err = t.leasesSoon(ctx); err != nil {
			return nil, core.AcquireResult{}, true, err
		}
	}
	resp, err := t.s.c.Txn(ctx).If(clientv3.Compare(clientv3.Version(t.k.base).WithPrefix(), "=", 0)).
		Then(puts(grantOps(t.k, req.Holder, t.r, 0, t.mine))...).
		Else(clientv3.OpGet(t.k.base, clientv3.WithPrefix())).Commit()
	if err != nil {
		t.failed(err)
		return nil, core.AcquireResult{}, true, err
	}
	if err := t.confirmed(ctx, resp.Succeeded); err != nil {
		return nil, core.AcquireResult{}, true, err
	}
	if resp.Succeeded {
		t.used = true
		return nil, core.AcquireResult{Granted: true, Fence: uint64(resp.Header.Revision << fenceShift)}, true, nil
	}
	if st, err = t.k.readState(resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs); err != nil {
		return nil, core.AcquireResult{}, true, err
	}
	return st, core.AcquireResult{}, false, nil
}

// decide takes the Store's turn on the key, decides the try against st and commits the decision
// (deciding again on what a failed transaction returns), and answers: a grant, or a refusal with
// its RetryAfter, its place kept for the Wait and its refusal for Register.
func (t *acquireTry) decide(ctx context.Context, st *state) (core.AcquireResult, error) {
	unlock, err := t.s.locks.lock(ctx, t.req.Key)
	if err != nil {
		return core.AcquireResult{}, err
	}
	defer unlock()
	p, resp, st, err := t.s.commit(ctx, t.k, st, func(st *state) (*plan, error) { return t.plan(ctx, st) })
	if err != nil {
		var sent *txnError
		t.unsure = t.granting && errors.As(err, &sent) && outcomeUnknown(err)
		if t.sess != 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.s.sess.forget(t.sess)
			return core.AcquireResult{}, errSessionLost
		}
		return core.AcquireResult{}, err
	}
	if resp != nil {
		t.s.recycle(p.drop...)
	}
	if p.grant {
		t.used = true
		fence := p.fence
		if fence == 0 {
			fence = resp.Header.Revision << fenceShift
		}
		return core.AcquireResult{Granted: true, Fence: uint64(fence)}, nil
	}
	if t.req.Wait > 0 && resp != nil {
		t.noteRefusal(p, st, resp)
	}
	res := p.res
	res.RetryAfter = t.s.retryAfter(ctx, st, t.req)
	return res, nil
}

// plan decides the try against st, and adds the writes of the caller's grant, on etcd leases it
// asks for then unless it has them, or of its place, on the Store's session lease.
func (t *acquireTry) plan(ctx context.Context, st *state) (*plan, error) {
	req := t.req
	p, err := decideAcquire(t.k, st, req)
	if err != nil {
		t.granting = false
		return nil, err
	}
	t.granting = p.grant
	if p.grant {
		e, ok := st.leases[req.Holder]
		t.held = ok && !e.untaken
		if t.mine.own == 0 {
			if t.mine, err = t.s.grantLeases(ctx, req.TTL, req.LockDelay); err != nil {
				return nil, err
			}
		}
		p.ops = append(p.ops, grantOps(t.k, req.Holder, t.r, p.fence, t.mine)...)
	}
	if p.place {
		if t.sess == 0 {
			if t.sess, err = t.s.session(ctx); err != nil {
				return nil, err
			}
		}
		r := t.r
		r.life = seconds(t.s.sessionTTL) // a grant the line makes it ends within its session's TTL
		if pl, ok := st.place(req.Holder); !ok || pl.lease != t.sess || pl.rec != r {
			// A place already as asked is not written again: the write would only fail the
			// others' transactions and wake the Store's waiters for nothing.
			p.ops = append(p.ops, clientv3.OpPut(t.k.of(kindPlace, req.Holder), r.encode(), clientv3.WithLease(t.sess)))
		}
	}
	return p, nil
}

// noteRefusal keeps the refusal p, committed by resp, for the caller's Register, with the records
// as its transaction left them when it wrote the caller's place (st, decided on, otherwise), and
// leaves the place when the Wait ends.
func (t *acquireTry) noteRefusal(p *plan, st *state, resp *clientv3.TxnResponse) {
	seed := st
	if p.place {
		if after, err := t.k.readState(resp.Header.Revision, resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs); err == nil {
			seed = after
		}
	}
	t.s.noteRefusal(t.req, seed, resp.Header.Revision)
	t.s.leaveWhenWaitEnds(t.req)
}

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

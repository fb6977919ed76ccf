package etcd

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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

// commit decides against the key's records st, writes the decision in one
// transaction that holds only if the key's records are as decided on, and decides again on the
// state a failed transaction returns, until one commits or nothing needs writing. It returns the
// plan, the transaction's response (nil when nothing was written) and the state decided on.
//
// The grants of the line a decision makes (plan.heads) go on one etcd lease that nobody renews,
// asked for once a decision makes one, of the TTL of the sessions the heads' places are on (the
// shortest): a grant its waiter never takes ends by itself within its waiter's session TTL, as
// a place does when its waiter dies, whether the waiter died, gave up, or its leave cannot get
// through, and the line moves on. Its waiter takes it onto etcd leases of its own TTL, and its
// lock delay begins then.
func (s *Store) commit(ctx context.Context, k keys, st *state, decide func(*state) (*plan, error)) (*plan, *clientv3.TxnResponse, *state, error) {
	return s.commitOn(ctx, k, st, &grantLease{s: s}, decide)
}

// commitOn is commit, the grants of the line going on g, which it settles.
func (s *Store) commitOn(ctx context.Context, k keys, st *state, g *grantLease, decide func(*state) (*plan, error)) (*plan, *clientv3.TxnResponse, *state, error) {
	defer g.settle()
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
		if len(p.heads) > 0 {
			id, err := g.get(ctx, headsLife(p.heads, seconds(s.sessionTTL)))
			if err != nil {
				return nil, nil, st, err
			}
			for i, h := range p.heads {
				r := h.rec
				r.untaken, r.idx, r.life = true, uint8(i), g.secs
				p.ops = append(p.ops, grantOps(k, h.holder, r, 0, leases{own: id})...)
			}
		}
		ops := p.ops
		if p.place {
			// The records as this transaction leaves them, for the waiter's watch to start from
			// its revision: a watch from an earlier revision is caught up by etcd only every
			// 100 ms, and a release in between would reach the waiter that late.
			ops = append(ops[:len(ops):len(ops)], clientv3.OpGet(k.base, clientv3.WithPrefix()))
		}
		resp, err := s.c.Txn(ctx).If(p.cmps...).Then(ops...).Else(clientv3.OpGet(k.base, clientv3.WithPrefix())).Commit()
		if err != nil && len(p.heads) > 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) && !g.renewed {
			// The grants' etcd lease may have ended (a stall of its TTL since it was asked
			// for): once more on a new one. etcd refused the transaction whole.
			g.lost()
			continue
		}
		if err != nil {
			if len(p.heads) > 0 && outcomeUnknown(err) {
				g.used = true // the grants may be on it
			}
			return nil, nil, st, &txnError{err}
		}
		if resp.Succeeded {
			g.used = len(p.heads) > 0
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

// txnError is the error of a transaction commit sent: unless etcd refused it, it may have
// committed, or may still commit.
type txnError struct{ err error }

func (e *txnError) Error() string { return e.err.Error() }
func (e *txnError) Unwrap() error { return e.err }

// outcomeUnknown reports whether a transaction that failed with err may have committed, or may
// still: anything but etcd's refusal of a lease it does not have (which it checks before
// applying anything).
func outcomeUnknown(err error) bool { return !errors.Is(err, rpctypes.ErrLeaseNotFound) }

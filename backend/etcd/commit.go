package etcd

import (
	"context"
	"errors"
	"time"

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

// txnError is the error of a transaction commit sent: unless etcd refused it, it may have
// committed, or may still commit.
type txnError struct{ err error }

func (e *txnError) Error() string { return e.err.Error() }
func (e *txnError) Unwrap() error { return e.err }

// outcomeUnknown reports whether a transaction that failed with err may have committed, or may
// still: anything but etcd's refusal of a lease it does not have (which it checks before
// applying anything).
func outcomeUnknown(err error) bool { return !errors.Is(err, rpctypes.ErrLeaseNotFound) }

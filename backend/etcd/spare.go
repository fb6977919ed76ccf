package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// spare is an etcd lease of the Store's that no record is on any more (its grant was released,
// or moved onto new leases), and the whole seconds it was granted for.
type spare struct {
	id   clientv3.LeaseID
	secs int64
}

// maxSpares bounds the etcd leases a Store keeps for its next grants.
const maxSpares = 64

// pooled is a spare kept for a next grant of the same TTL, and the time etcd keeps it until at
// least (see sparePool.lives).
type pooled struct {
	id    clientv3.LeaseID
	until time.Time
}

// sparePool is the etcd leases a Store keeps for its next grants, by their whole seconds, the
// leases being revoked (discard), which are never spares, and how long the leases the Store
// granted or renewed live at least.
type sparePool struct {
	mu     sync.Mutex
	closed bool
	bySecs map[int64][]pooled
	in     map[clientv3.LeaseID]bool
	doomed map[clientv3.LeaseID]bool
	n      int
	// lives is, for each etcd lease the Store granted or renewed, the time etcd keeps it until
	// at least: the request's sending plus the TTL etcd answered. A lease the Store knows no
	// such time of (another Store's: a grant of the line's, an adopted holder's) is never a
	// spare but revoked: its age is unknown, and a spare that etcd has ended holds up the
	// renewals behind it on the Store's stream until etcd's lessor revokes it.
	lives map[clientv3.LeaseID]time.Time
	notes int
}

// lived notes that etcd granted or renewed lease id for ttl seconds in answer to a request sent
// at sent.
func (p *sparePool) lived(id clientv3.LeaseID, sent time.Time, ttl int64) {
	if ttl <= 0 {
		return
	}
	until := sent.Add(time.Duration(ttl) * time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lives == nil {
		p.lives = map[clientv3.LeaseID]time.Time{}
	}
	if until.After(p.lives[id]) {
		p.lives[id] = until
	}
	if p.notes++; p.notes%1024 == 0 {
		now := time.Now()
		for id, t := range p.lives {
			if t.Before(now) {
				delete(p.lives, id)
			}
		}
	}
}

// spareMargin is how long a spare must still live, at least, to be taken: long enough for its
// renewal to reach etcd first. A quarter of its TTL, between 250 ms and a second.
func spareMargin(secs int64) time.Duration {
	return min(max(time.Duration(secs)*time.Second/4, 250*time.Millisecond), time.Second)
}

// recycle keeps leases no record is on for the Store's next grants of the same TTL, and revokes
// (in the background) those it has no room for. A grant on a spare renews it first — a message
// each way on the Store's renewal stream (renewer), not a write through etcd's consensus as a new
// lease and its revocation are — so an uncontended pair costs two consensus writes, as etcd's own
// Mutex does. A spare nobody takes ends at its TTL by itself; Close revokes those left.
func (s *Store) recycle(sp ...spare) {
	sess := s.sess.current()
	revoke := s.spares.put(sess, sp)
	s.revoke(revoke...)
}

// put keeps sp, but for the session lease sess, leases kept or doomed already and leases that end
// within their margin (left to their TTL), and returns those it has no room for, or whose life
// it does not know, to revoke: all of them once closed.
func (p *sparePool) put(sess clientv3.LeaseID, sp []spare) []clientv3.LeaseID {
	var revoke []clientv3.LeaseID
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range sp {
		until, known := p.lives[x.id]
		switch {
		case x.id == 0 || x.id == sess || p.in[x.id] || p.doomed[x.id]:
		case p.closed || p.n >= maxSpares || !known:
			revoke = append(revoke, x.id)
		case time.Until(until) < spareMargin(x.secs):
		default:
			if p.bySecs == nil {
				p.bySecs, p.in = map[int64][]pooled{}, map[clientv3.LeaseID]bool{}
			}
			p.bySecs[x.secs] = append(p.bySecs[x.secs], pooled{x.id, until})
			p.in[x.id] = true
			p.n++
		}
	}
	return revoke
}

// take returns a spare of secs seconds that still lives long enough for a renewal to reach it
// (one within its margin of its end may be gone first: it is let go), and whether there was one.
func (p *sparePool) take(secs int64) (clientv3.LeaseID, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.bySecs[secs]) > 0 {
		q := p.bySecs[secs]
		x := q[len(q)-1]
		p.bySecs[secs] = q[:len(q)-1]
		delete(p.in, x.id)
		p.n--
		if time.Until(x.until) >= spareMargin(secs) {
			return x.id, true
		}
	}
	return 0, false
}

// lease returns an etcd lease of secs seconds from now: a spare, renewed, or a new one.
func (s *Store) lease(ctx context.Context, secs int64) (clientv3.LeaseID, error) {
	for {
		id, ok := s.spares.take(secs)
		if !ok {
			return s.grant(ctx, secs)
		}
		if ttl, err := s.renew(ctx, id); err == nil && ttl >= secs {
			return id, nil
		} else if ctx.Err() != nil {
			return 0, ctx.Err()
		} else if errors.Is(err, core.ErrClosed) {
			return 0, err
		}
	}
}

// leaseSoon is lease for a caller with a request to send on the lease right away: a spare's
// renewal is sent, not waited for, and confirm waits for it (nil when there is nothing to
// wait for: a new lease). confirm returns an error wrapping rpctypes.ErrLeaseNotFound when
// the spare had ended (its records with it), and another error when etcd did not say that it
// renewed the spare for secs: the lease may then end before secs, whatever was put on it.
func (s *Store) leaseSoon(ctx context.Context, secs int64) (id clientv3.LeaseID, confirm func(context.Context) error, err error) {
	id, ok := s.spares.take(secs)
	if !ok {
		id, err := s.grant(ctx, secs)
		return id, nil, err
	}
	renewed := s.renewSoon(id)
	return id, func(ctx context.Context) error {
		ttl, err := renewed(ctx)
		if err == nil && ttl < secs {
			err = fmt.Errorf("etcd renewed lease %x for %ds, not %ds", id, ttl, secs)
		}
		return err
	}, nil
}

// grant asks etcd for a new lease of secs seconds, and notes how long it lives at least.
func (s *Store) grant(ctx context.Context, secs int64) (clientv3.LeaseID, error) {
	sent := time.Now()
	g, err := s.c.Grant(ctx, secs)
	if err != nil {
		return 0, err
	}
	s.spares.lived(g.ID, sent, g.TTL)
	return g.ID, nil
}

// close marks the pool closed (a lease recycled after is revoked) and returns the spares it
// kept, for Close to revoke.
func (p *sparePool) close() []clientv3.LeaseID {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var ids []clientv3.LeaseID
	for _, q := range p.bySecs {
		for _, x := range q {
			ids = append(ids, x.id)
		}
	}
	clear(p.bySecs)
	clear(p.in)
	p.n = 0
	return ids
}

// doom marks ids as being revoked (doomed set), never to be kept as spares, or no longer
// (doomed unset).
func (p *sparePool) doom(ids []clientv3.LeaseID, doomed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.doomed == nil {
		p.doomed = map[clientv3.LeaseID]bool{}
	}
	for _, id := range ids {
		if doomed {
			p.doomed[id] = true
		} else {
			delete(p.doomed, id)
		}
	}
}

// discard ends the etcd leases of a grant whose transaction's outcome is unknown: committed
// (its caller told it failed), or still on its way. Revoked, the leases take such a grant with
// them, and a transaction that arrives after fails (etcd refuses a write on a lease it does not
// have), so the grant is held by nobody for at most the revoke's round trip. Until the revoke is
// done the leases are never spares, whoever releases the grant. The revoke is tried again while
// etcd cannot be reached, until the leases would have ended by themselves. Once the Store's
// background work has ended (Close, or the client's Close) nothing is sent: the leases stay
// marked, never spares, and end at their TTL.
func (s *Store) discard(l leases) {
	var ids []clientv3.LeaseID
	for _, id := range []clientv3.LeaseID{l.own, l.delay} {
		if id != 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	s.spares.doom(ids, true)
	budget := time.Duration(max(l.ownSecs, l.delaySecs))*time.Second + 2*time.Second
	s.goBackgroundFor(budget, func(ctx context.Context) {
		defer s.spares.doom(ids, false)
		for _, id := range ids {
			backoff := 20 * time.Millisecond
			for {
				_, err := s.c.Revoke(ctx, id)
				if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) || ctx.Err() != nil {
					break
				}
				select {
				case <-time.After(backoff):
					backoff = min(2*backoff, time.Second)
				case <-ctx.Done():
				}
			}
		}
	})
}

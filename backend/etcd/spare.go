package etcd

import (
	"context"
	"errors"
	"time"

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

// pooled is a spare kept for a next grant of the same TTL, since when.
type pooled struct {
	id clientv3.LeaseID
	at time.Time
}

// recycle keeps leases no record is on for the Store's next grants of the same TTL, and revokes
// (in the background) those it has no room for. A grant on a spare renews it first — a
// keep-alive, not a write through etcd's consensus as a new lease and its revocation are — so
// an uncontended pair costs two consensus writes, as etcd's own Mutex does. A spare nobody takes
// ends at its TTL by itself; Close revokes those left.
func (s *Store) recycle(sp ...spare) {
	var revoke []clientv3.LeaseID
	s.mu.Lock()
	for _, x := range sp {
		switch {
		case x.id == 0 || x.id == s.sess || s.inPool[x.id] || s.doomed[x.id]:
		case s.closed || s.pooledN >= maxSpares:
			revoke = append(revoke, x.id)
		default:
			s.pool[x.secs] = append(s.pool[x.secs], pooled{x.id, time.Now()})
			s.inPool[x.id] = true
			s.pooledN++
		}
	}
	s.mu.Unlock()
	s.revoke(revoke...)
}

// lease returns an etcd lease of secs seconds from now: a spare, renewed, or a new one.
func (s *Store) lease(ctx context.Context, secs int64) (clientv3.LeaseID, error) {
	for {
		s.mu.Lock()
		var p pooled
		ok := false
		for len(s.pool[secs]) > 0 && !ok {
			q := s.pool[secs]
			p, s.pool[secs] = q[len(q)-1], q[:len(q)-1]
			delete(s.inPool, p.id)
			s.pooledN--
			// One near its end may be gone before its renewal arrives: let it go.
			ok = time.Since(p.at) < time.Duration(secs)*time.Second-250*time.Millisecond
		}
		s.mu.Unlock()
		if !ok {
			g, err := s.c.Grant(ctx, secs)
			if err != nil {
				return 0, err
			}
			return g.ID, nil
		}
		if r, err := s.c.KeepAliveOnce(ctx, p.id); err == nil && r.TTL >= secs {
			return p.id, nil
		} else if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}

// dropSpares revokes the spares the Store kept (Close).
func (s *Store) dropSpares() []clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []clientv3.LeaseID
	for _, q := range s.pool {
		for _, p := range q {
			ids = append(ids, p.id)
		}
	}
	clear(s.pool)
	clear(s.inPool)
	s.pooledN = 0
	return ids
}

// discard ends the etcd leases of a grant whose transaction's outcome is unknown: committed
// (its caller told it failed), or still on its way. Revoked, the leases take such a grant with
// them, and a transaction that arrives after fails (etcd refuses a write on a lease it does not
// have), so the grant is held by nobody for at most the revoke's round trip. Until the revoke is
// done the leases are never spares, whoever releases the grant. The revoke is tried again while
// etcd cannot be reached, until the leases would have ended by themselves.
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
	s.mu.Lock()
	for _, id := range ids {
		s.doomed[id] = true
	}
	s.mu.Unlock()
	budget := time.Duration(max(l.ownSecs, l.delaySecs))*time.Second + 2*time.Second
	s.goBackgroundFor(budget, func(ctx context.Context) {
		defer func() {
			s.mu.Lock()
			for _, id := range ids {
				delete(s.doomed, id)
			}
			s.mu.Unlock()
		}()
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

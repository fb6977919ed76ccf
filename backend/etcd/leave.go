package etcd

import (
	"context"
	"sync"
	"time"

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

// pending counts the leaves a Store owes on one key, or of one holder on it: Inspect waits for
// the former, and the holder's tries for the latter.
type pending struct {
	n    int
	done chan struct{}
}

// leaves are the leaves a Store owes, counted by key and by place.
type leaves struct {
	mu      sync.Mutex
	byKey   map[string]*pending
	byPlace map[placeID]*pending
}

// add counts one more leave of the place id, and returns its counts by key and by place.
func (l *leaves) add(id placeID) (byKey, byPlace *pending) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey, l.byPlace = map[string]*pending{}, map[placeID]*pending{}
	}
	byKey, byPlace = l.byKey[id.key], l.byPlace[id]
	if byKey == nil {
		byKey = &pending{done: make(chan struct{})}
		l.byKey[id.key] = byKey
	}
	if byPlace == nil {
		byPlace = &pending{done: make(chan struct{})}
		l.byPlace[id] = byPlace
	}
	byKey.n++
	byPlace.n++
	return byKey, byPlace
}

// done counts a leave of the place id, counted by add in byKey and byPlace, done.
func (l *leaves) done(id placeID, byKey, byPlace *pending) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if byKey.n--; byKey.n == 0 {
		close(byKey.done)
		if l.byKey[id.key] == byKey {
			delete(l.byKey, id.key)
		}
	}
	if byPlace.n--; byPlace.n == 0 {
		close(byPlace.done)
		if l.byPlace[id] == byPlace {
			delete(l.byPlace, id)
		}
	}
}

// ofKey returns the leaves owed on key, or nil.
func (l *leaves) ofKey(key string) *pending {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byKey[key]
}

// ofPlace returns the leaves owed of the place id, or nil.
func (l *leaves) ofPlace(id placeID) *pending {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byPlace[id]
}

// leaveInBackground leaves holder's place on key in the background; again after a second when
// late is set and it found nothing then, for a try whose transaction may still arrive. Once the
// Store's background work has ended it does nothing, and counts nothing owed.
func (s *Store) leaveInBackground(key, holder string, late bool) {
	id := refusalID(key, holder)
	byKey, byPlace := s.leaves.add(id)
	started := s.goBackgroundFor(leaveBudget, func(ctx context.Context) {
		defer s.leaves.done(id, byKey, byPlace)
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
	if !started {
		// Nothing can be sent any more (the Store or its client closed): the place ends with
		// the session lease, and the tries and Inspects in flight must not wait for it.
		s.leaves.done(id, byKey, byPlace)
	}
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

// waitLeaving waits for the leaves the Store owes on key.
func (s *Store) waitLeaving(ctx context.Context, key string) error {
	return s.leaves.ofKey(key).wait(ctx)
}

// waitHolderLeaving waits for the leaves the Store owes of holder on key, so that a try sent
// after them keeps the place it takes and the grant the line makes it: a leave takes out
// whatever place and untaken grant the holder has.
func (s *Store) waitHolderLeaving(ctx context.Context, key, holder string) error {
	return s.leaves.ofPlace(refusalID(key, holder)).wait(ctx)
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

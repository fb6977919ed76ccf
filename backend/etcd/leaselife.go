package etcd

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
	out, ask := s.lifeCache.get(ids)
	if len(ask) == 0 {
		return out
	}
	got := s.lives(ctx, ask)
	s.lifeCache.put(got)
	maps.Copy(out, got)
	return out
}

// lifeCache is what etcd said of leases, for RetryAfter: at most maxLives answers.
type lifeCache struct {
	mu   sync.Mutex
	byID map[clientv3.LeaseID]life
}

// maxLives bounds the answers a lifeCache keeps.
const maxLives = 4096

// get returns the answers kept for ids that have not run out, and the ids it has none for.
func (c *lifeCache) get(ids []clientv3.LeaseID) (map[clientv3.LeaseID]life, []clientv3.LeaseID) {
	out := make(map[clientv3.LeaseID]life, len(ids))
	var ask []clientv3.LeaseID
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if l, ok := c.byID[id]; ok && time.Since(l.asked) < time.Duration(l.ttl)*time.Second {
			out[id] = l
		} else {
			ask = append(ask, id)
		}
	}
	return out, ask
}

// put keeps the answers got, dropping those run out, or all, to make room.
func (c *lifeCache) put(got map[clientv3.LeaseID]life) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[clientv3.LeaseID]life{}
	}
	if len(c.byID)+len(got) > maxLives {
		for id, l := range c.byID {
			if time.Since(l.asked) >= time.Duration(l.ttl)*time.Second {
				delete(c.byID, id)
			}
		}
		if len(c.byID)+len(got) > maxLives {
			clear(c.byID)
		}
	}
	maps.Copy(c.byID, got)
}

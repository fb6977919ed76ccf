package etcd

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// grantLease is the etcd lease one commit puts the grants of the line on, asked for once needed,
// or ahead (prefetch).
type grantLease struct {
	s       *Store
	secs    int64
	id      clientv3.LeaseID
	used    bool // the grants are on it, or may be: it is never a spare then
	renewed bool // a lease was lost and asked for again
	ahead   chan askedLease
}

// askedLease is the answer to a lease asked for ahead.
type askedLease struct {
	id   clientv3.LeaseID
	secs int64
	err  error
}

// prefetch asks for a lease of the Store's session TTL ahead, in parallel with the caller's
// first round trip, when the key's line was there at its last release through the Store: a
// release that meets it then grants its heads without waiting for the lease. A wrong guess
// costs a spare's keep-alive; the lease is kept as a spare.
func (s *Store) prefetch(ctx context.Context, key string) *grantLease {
	g := &grantLease{s: s}
	if !s.lines.had(key) {
		return g
	}
	g.ahead = make(chan askedLease, 1)
	secs := seconds(s.sessionTTL)
	go func() {
		id, err := s.lease(ctx, secs)
		g.ahead <- askedLease{id, secs, err}
	}()
	return g
}

// collect waits for a lease asked for ahead and holds it, unless it failed.
func (g *grantLease) collect() {
	if g.ahead == nil {
		return
	}
	a := <-g.ahead
	g.ahead = nil
	if a.err == nil {
		g.id, g.secs = a.id, a.secs
	}
}

// get returns a lease of secs seconds, asking for it on first use and when secs changed.
func (g *grantLease) get(ctx context.Context, secs int64) (clientv3.LeaseID, error) {
	g.collect()
	if g.id != 0 && g.secs != secs {
		g.s.recycle(spare{g.id, g.secs})
		g.id = 0
	}
	if g.id == 0 {
		id, err := g.s.lease(ctx, secs)
		if err != nil {
			return 0, err
		}
		g.id, g.secs = id, secs
	}
	return g.id, nil
}

// headsLife is the whole seconds of the shortest session the heads' places are on (as their
// records say; def for a record that does not).
func headsLife(heads []entry, def int64) int64 {
	secs := int64(0)
	for _, h := range heads {
		l := h.life
		if l <= 0 {
			l = def
		}
		if secs == 0 || l < secs {
			secs = l
		}
	}
	return secs
}

// lost forgets a lease etcd refused as not found.
func (g *grantLease) lost() { g.id, g.renewed = 0, true }

// settle keeps an unused lease as a spare, once one asked for ahead is there, and lets go of it:
// settled again, it does nothing.
func (g *grantLease) settle() {
	g.collect()
	if g.id != 0 && !g.used {
		g.s.recycle(spare{g.id, g.secs})
	}
	g.id = 0
}

// lineHints are the keys whose line was there at their last release through the Store.
type lineHints struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// maxLineHints bounds the keys lineHints keeps; past it they are forgotten all at once.
const maxLineHints = 4096

// note keeps whether key's release met a line.
func (h *lineHints) note(key string, line bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !line:
		delete(h.keys, key)
	case h.keys == nil || len(h.keys) >= maxLineHints:
		h.keys = map[string]struct{}{key: {}}
	default:
		h.keys[key] = struct{}{}
	}
}

// had reports whether key's last release met a line.
func (h *lineHints) had(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.keys[key]
	return ok
}

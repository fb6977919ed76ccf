package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// settle deals with the answers of an acquire's stragglers once the acquire's outcome is known.
// A later acquire of the same holder on the key supersedes it: that acquire asks every node
// again and settles what it finds, and a release from this one could end its grant (a node
// re-grants the holder idempotently, at the same fence).
type settle struct {
	s       *Store
	id      keyHolder
	req     core.AcquireRequest
	timeout time.Duration

	mu         sync.Mutex
	known      bool
	fence      uint64 // the lease's fence; 0 when refused
	keep       bool   // leave every answer be
	superseded bool
	left       int // stragglers' answers to come
	pending    []straggler
}

type straggler struct {
	i int
	r result[core.AcquireResult]
}

// newSettle returns the settle of a new acquire of req, superseding the holder's previous one.
func (s *Store) newSettle(req core.AcquireRequest, timeout time.Duration) *settle {
	st := &settle{s: s, id: keyHolder{req.Key, req.Holder}, req: req, timeout: timeout}
	s.mu.Lock()
	if prev := s.settles[st.id]; prev != nil {
		prev.mu.Lock()
		prev.superseded = true
		prev.mu.Unlock()
	}
	s.settles[st.id] = st
	s.mu.Unlock()
	return st
}

// expect counts n more stragglers' answers to come.
func (st *settle) expect(n int) {
	st.mu.Lock()
	st.left += n
	st.mu.Unlock()
}

// late takes a straggler's answer: it acts on it now if the outcome is known, else at decide.
func (st *settle) late(i int, r result[core.AcquireResult]) {
	st.mu.Lock()
	if !st.known {
		st.pending = append(st.pending, straggler{i, r})
		st.mu.Unlock()
		return
	}
	st.mu.Unlock()
	st.act(i, r)
}

// decide records the outcome (fence 0: refused) and settles the stragglers that answered
// before it, each on its own goroutine.
func (st *settle) decide(fence uint64, keep bool) {
	st.mu.Lock()
	st.known, st.fence, st.keep = true, fence, keep
	pending := st.pending
	st.pending = nil
	st.mu.Unlock()
	for _, p := range pending {
		go st.act(p.i, p.r)
	}
	st.done(0)
}

// done counts n answers settled, and forgets the settle when none are left.
func (st *settle) done(n int) {
	st.mu.Lock()
	st.left -= n
	over := st.known && st.left <= 0
	st.mu.Unlock()
	if over {
		st.s.mu.Lock()
		if st.s.settles[st.id] == st {
			delete(st.s.settles, st.id)
		}
		st.s.mu.Unlock()
	}
}

func (st *settle) act(i int, r result[core.AcquireResult]) {
	defer st.done(1)
	st.mu.Lock()
	skip := st.keep || st.superseded
	st.mu.Unlock()
	var fence uint64
	switch {
	case skip || errors.Is(r.err, core.ErrInvalid) || errors.Is(r.err, core.ErrLimitMismatch):
		return
	case r.err == nil && r.v.Granted:
		if st.fence != 0 && r.v.Fence == st.fence {
			return // part of the lease
		}
		fence = r.v.Fence
	case r.err == nil:
		return // refused
	case st.fence != 0:
		return // granted: a node that failed may hold the lease at some fence; Extend settles it
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.timeout)
	defer cancel()
	// A grant at another fence is released, never raised: the lease may have been released
	// meanwhile, and a raise would take it again on this node.
	st.s.nodes[i].Release(ctx, core.ReleaseRequest{Key: st.req.Key, Holder: st.req.Holder, Fence: fence})
}

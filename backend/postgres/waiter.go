package postgres

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/core"
)

// try is a try that will wait, from beforeTry to afterTry: whether its place in the line names
// the listening connection, which generation of it, and the notice a grant to it will send.
type try struct {
	key     string
	holder  string
	id      int64
	up      bool
	gen     uint64
	pid     int32
	started time.Time
	notice  string
}

func (l *listener) beforeTry(key, holder string) try {
	l.mu.Lock()
	defer l.mu.Unlock()
	return try{key: key, holder: holder, up: l.up, gen: l.gen, pid: l.pid, started: l.started, notice: noticeOf(key, holder)}
}

// afterTry records a try's outcome: a refusal whose place names this listener, unchanged since,
// lets Register trust that no grant to it went unheard. A refusal is owed a leave until its
// Register, so that Close can send it; afterTry reports a refusal that came after Close, whose
// caller cannot Register and must leave its place itself.
func (l *listener) afterTry(t try, granted bool) (closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.waiters[t.notice] {
		w.queued = !granted // a grant took the holder out of the line; a refusal that waits keeps its place
	}
	if granted {
		delete(l.owed, t.notice)
	} else {
		if l.s.closed.Load() {
			return true // Close, which holds l.mu when it collects the leaves owed, came before
		}
		if len(l.waiters[t.notice]) == 0 { // else its Waiter owes the leave
			if len(l.owed) >= maxPending {
				clear(l.owed) // callers that never registered; a place left then ends with its wait
			}
			l.owed[t.notice] = t
		}
	}
	switch {
	case granted:
		delete(l.refusals, t.notice)
		delete(l.pending, t.notice) // the wake of the grant it just took, if any
	case t.up:
		if len(l.refusals) >= maxPending {
			clear(l.refusals) // callers that never registered; the rest start woken
		}
		l.refusals[t.notice] = t.gen
	default:
		delete(l.refusals, t.notice)
	}
	return false
}

// Register implements core.Notifier. It does no I/O and ignores ctx: a caller whose ctx ended still
// gets the Waiter whose Close takes its place out of the line. The Waiter is woken when the line
// grants req.Holder a lease on req.Key, and is Reliable while the Store's listening connection is
// up; it starts woken unless no grant can have gone unheard since the refused try. After Close of
// the Store, Register fails with core.ErrClosed.
func (s *Store) Register(_ context.Context, req core.AcquireRequest) (core.Waiter, error) {
	if s.closed.Load() {
		return nil, core.ErrClosed
	}
	l := s.l
	w := &waiter{l: l, key: req.Key, holder: req.Holder, notice: noticeOf(req.Key, req.Holder), c: make(chan struct{}, 1), queued: true}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiters[w.notice] = append(l.waiters[w.notice], w)
	gen, refused := l.refusals[w.notice]
	_, missed := l.pending[w.notice]
	delete(l.refusals, w.notice)
	delete(l.pending, w.notice)
	delete(l.owed, w.notice) // the Waiter owes the leave now
	if !l.up || !refused || gen != l.gen || missed {
		w.wake()
	}
	return w, nil
}

// waiter is one enrollment of a caller waiting in a key's line.
type waiter struct {
	l                   *listener
	key, holder, notice string
	c                   chan struct{}
	closed              bool // guarded by l.mu
	// queued says the holder may have a place in the line, or a grant from it not taken: its
	// latest try was refused and waits. A try that was granted took both, so Close sends no
	// leave. Guarded by l.mu.
	queued bool
}

func (w *waiter) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// C implements core.Waiter.
func (w *waiter) C() <-chan struct{} { return w.c }

// Reliable implements core.Waiter: true while the listening connection is up.
func (w *waiter) Reliable() bool { return w.l.isUp() }

// Close implements core.Waiter: the holder's place leaves the line, and a grant the line made it
// that it has not taken goes to the next waiters, in one call sent in the background — unless
// the holder's latest try was granted, which left it neither.
func (w *waiter) Close() {
	l := w.l
	// s.lmu first, as Store.Close takes it: a Close of the Store either finds this waiter
	// enrolled, and leaves its place, or comes after its leave has started.
	l.s.lmu.Lock()
	defer l.s.lmu.Unlock()
	l.mu.Lock()
	if w.closed {
		l.mu.Unlock()
		return
	}
	w.closed = true
	ws := slices.DeleteFunc(l.waiters[w.notice], func(x *waiter) bool { return x == w })
	if len(ws) == 0 {
		delete(l.waiters, w.notice)
	} else {
		l.waiters[w.notice] = ws
	}
	queued := w.queued
	l.mu.Unlock()
	if len(ws) == 0 && queued && !l.s.closed.Load() {
		l.s.leaveLocked(w.key, w.holder, nil)
	}
}

// queued returns, one per holder and key, the holders that may have a place in the line or a
// grant from it not taken: those of open Waiters, and of refused tries not yet registered.
func (l *listener) queued() []try {
	l.mu.Lock()
	defer l.mu.Unlock()
	owed := slices.Collect(maps.Values(l.owed))
	for notice, ws := range l.waiters {
		if _, ok := l.owed[notice]; ok {
			continue
		}
		if i := slices.IndexFunc(ws, func(w *waiter) bool { return w.queued }); i >= 0 {
			owed = append(owed, try{key: ws[i].key, holder: ws[i].holder})
		}
	}
	return owed
}

// noticeOf returns what the line sends a waiter's Store when it grants holder a lease on key:
// the hex MD5 of key's length (4 bytes, big-endian), key and holder, as serve computes it.
func noticeOf(key, holder string) string {
	b := make([]byte, 4, 4+len(key)+len(holder))
	binary.BigEndian.PutUint32(b, uint32(len(key)))
	b = append(append(b, key...), holder...)
	return md5hex(b)
}

// md5hex returns the hex MD5 of b, as PostgreSQL's md5(bytea) does.
func md5hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

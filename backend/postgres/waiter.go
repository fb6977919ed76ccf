package postgres

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
)

// try is a try that will wait, from beforeTry to afterTry or endTry: whether its place in the
// line names the listening connection, which generation of it, the notice a grant to it will
// send, and the request and when it was sent (the zero Sent when a grant made after it may not
// be taken without a round trip: the try raised fences, see AcquireAbove).
type try struct {
	key     string
	holder  string
	id      int64
	up      bool
	gen     uint64
	pid     int32
	started time.Time
	notice  string
	sent    waitline.Sent
}

// refusal is what Register needs of a refused try that will wait: the listener's generation it
// was sent in, the key's last fence then (the line's grants to the holder after it are above
// it), and the try as sent.
type refusal struct {
	gen   uint64
	floor uint64
	sent  waitline.Sent
}

// beforeTry starts a try of req that will wait; plain says it raises no fence, so that a grant
// after its refusal may be taken from the line's notice. No grant to the holder is taken from a
// notice while the try is in flight; afterTry or endTry must follow.
func (l *listener) beforeTry(req core.AcquireRequest, plain bool) try {
	var sent waitline.Sent
	if plain {
		sent = waitline.Sent{At: time.Now(), Req: req}
	}
	t := try{key: req.Key, holder: req.Holder, notice: noticeOf(req.Key, req.Holder), sent: sent}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight.Begin(t.notice)
	t.up, t.gen, t.pid, t.started = l.up, l.gen, l.pid, l.started
	return t
}

// endTry ends a try, from beforeTry, that got no answer.
func (l *listener) endTry(t try) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight.End(t.notice)
}

// afterTry records a try's outcome and the fence it reported (a grant's, or on a refusal the
// key's last fence): a refusal whose place names this listener, unchanged since, lets Register
// trust that no grant to it went unheard. A refusal is owed a leave until its Register, so that
// Close can send it; afterTry reports a refusal that came after Close, whose caller cannot
// Register and must leave its place itself.
func (l *listener) afterTry(t try, granted bool, fence uint64) (closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight.End(t.notice)
	for _, w := range l.waiters[t.notice] {
		if granted {
			w.Found(fence)
		} else {
			w.Refused(fence, t.sent)
		}
	}
	if granted {
		delete(l.owed, t.notice)
	} else {
		if l.s.closed.Load() {
			return true // Close, which holds l.mu when it collects the leaves owed, came before
		}
		if len(l.waiters[t.notice]) == 0 { // else its waiter owes the leave
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
		l.refusals[t.notice] = refusal{gen: t.gen, floor: fence, sent: t.sent}
	default:
		delete(l.refusals, t.notice)
	}
	return false
}

// Register implements core.Notifier. It does no I/O and ignores ctx: a caller whose ctx ended still
// gets the waiter whose Close takes its place out of the line. The waiter is woken when the line
// grants req.Holder a lease on req.Key, and is Reliable while the Store's listening connection is
// up; it starts woken unless no grant can have gone unheard since the refused try. After Close of
// the Store, Register fails with core.ErrClosed.
func (s *Store) Register(_ context.Context, req core.AcquireRequest) (core.Wake, error) {
	if s.closed.Load() {
		return nil, core.ErrClosed
	}
	l := s.l
	w := &waiter{l: l, key: req.Key, holder: req.Holder, notice: noticeOf(req.Key, req.Holder), c: make(chan struct{}, 1)}
	w.Queued = true
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiters[w.notice] = append(l.waiters[w.notice], w)
	r, refused := l.refusals[w.notice]
	p, missed := l.pending[w.notice]
	delete(l.refusals, w.notice)
	delete(l.pending, w.notice)
	delete(l.owed, w.notice) // the waiter owes the leave now
	w.Floor, w.Sent = r.floor, r.sent
	if refused && p.fence > r.floor {
		w.Grant = p.fence // heard of before this Register: the waiter takes it
	}
	if !l.up || !refused || r.gen != l.gen || missed {
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
	waitline.Place           // guarded by l.mu
}

func (w *waiter) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// granted wakes the waiter for a grant from the line with fence, and keeps it to be taken,
// unless it is stale: made before the holder's latest refusal. l.mu must be held.
func (w *waiter) granted(fence uint64) {
	if w.Granted(fence) {
		w.wake()
	}
}

// takeGrant hands req's holder, enrolled alone on the key and waiting, the grant the line made
// it since its refused try, heard of in its notice, without a round trip, as
// waitline.Place.Take decides: the fence, and how long the lease has left at the least. It
// reports false, and changes nothing, when Take refuses, the Store is closed, the holder has
// several waiters, or a try of the holder is in flight. The grant is then taken: closing the
// waiter sends no leave, which would give it back. The lease stays marked untaken in the
// database until its first Extend, which nothing but such a leave reads.
func (l *listener) takeGrant(req core.AcquireRequest) (fence uint64, left time.Duration, ok bool) {
	if !req.Unshared {
		return 0, 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiters) == 0 {
		return 0, 0, false // the uncontended path: no waiter, no notice to compute
	}
	notice := noticeOf(req.Key, req.Holder)
	ws := l.waiters[notice]
	if len(ws) != 1 || ws[0].closed || l.s.closed.Load() || l.inflight.Busy(notice) {
		return 0, 0, false
	}
	return ws[0].Take(req, time.Now())
}

// C implements core.Wake.
func (w *waiter) C() <-chan struct{} { return w.c }

// Reliable implements core.Wake: true while the listening connection is up.
func (w *waiter) Reliable() bool { return w.l.isUp() }

// Close implements core.Wake: the holder's place leaves the line, and a grant the line made it
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
	queued := w.Owes()
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
		if i := slices.IndexFunc(ws, func(w *waiter) bool { return w.Owes() }); i >= 0 {
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

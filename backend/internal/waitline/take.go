package waitline

import (
	"time"

	"github.com/leasehold/leasehold/core"
)

// MaxTakeAge is the longest a waiter may have waited for a grant from the line and still take it
// without a round trip, as a fraction of its TTL: the wait must be under TTL/MaxTakeAge. A grant
// taken so has its TTL less the wait left; one taken later is renewed by a round trip, for its
// full TTL.
const MaxTakeAge = 2

// Sent is a refused try as it was sent: its request, and when. A grant the line makes the holder
// after that refusal is made on that request, after it was sent, so it expires no sooner than
// Req.TTL after At (by the server's clock, which runs at the client's rate within drift). The
// zero Sent allows no take (a try that raised fences, say).
type Sent struct {
	At  time.Time
	Req core.AcquireRequest
}

// Same reports whether asked asks for what sent asked for: the same Key, Holder, Permits, Limit,
// TTL, Value, LockDelay and Unshared (Wait may differ: it is the time left to wait).
func Same(sent, asked core.AcquireRequest) bool {
	return sent.Key == asked.Key && sent.Holder == asked.Holder && sent.Permits == asked.Permits &&
		sent.Limit == asked.Limit && sent.TTL == asked.TTL && sent.Value == asked.Value &&
		sent.LockDelay == asked.LockDelay && sent.Unshared == asked.Unshared
}

// Place is one Store's record of a holder's standing in a key's line: a grant from the line
// heard of is the holder's when its fence is above Floor, the key's last fence at the holder's
// latest refusal; Grant is the fence of such a grant not taken yet (0: none); Queued says the
// holder may have a place in the line (its latest try was refused and waits); Sent is that
// refused try. The zero Place has no place and no grant. Its methods are not safe for concurrent
// use: the driver guards a Place with its own lock.
type Place struct {
	Floor, Grant uint64
	Queued       bool
	Sent         Sent
}

// Granted records a grant of fence from the line and reports whether it is news, to wake the
// waiter for: not when it is stale (made before the holder's latest refusal) or already known.
func (p *Place) Granted(fence uint64) bool {
	if fence <= p.Floor || fence == p.Grant {
		return false
	}
	p.Grant = max(p.Grant, fence)
	return true
}

// Refused records a refused try that waits: the holder has a place, and a grant from the line is
// its own only above floor, the key's last fence at the refusal (one heard of before, at or below
// it, is dropped: the notice and the reply crossed).
func (p *Place) Refused(floor uint64, sent Sent) {
	p.Queued, p.Floor, p.Sent = true, floor, sent
	if p.Grant <= floor {
		p.Grant = 0
	}
}

// Found records a try that was granted fence: the grant took the holder's place, and any grant
// from the line heard of up to fence (it is this one, or stale).
func (p *Place) Found(fence uint64) {
	p.Queued, p.Floor = false, max(p.Floor, fence)
	if p.Grant <= p.Floor {
		p.Grant = 0
	}
}

// Released records that the holder released its lease: no grant heard of before its next refusal
// is its to take.
func (p *Place) Released() { p.Floor, p.Grant = ^uint64(0), 0 }

// Owes reports whether the holder owes the line a leave should it give up: it may have a place,
// or a grant from the line it has not taken.
func (p *Place) Owes() bool { return p.Queued || p.Grant > p.Floor }

// Take hands the holder, asking req at now, the grant the line made it since its refused try,
// without a round trip: its fence, and how long the lease has left at the least (req.TTL from
// the refused try's sending, less the wait since). It reports false, and changes nothing, when
// req is not Unshared, there is no such grant, req is not the refused request (Same), or the wait
// took TTL/MaxTakeAge or more (or the clock went back). A grant taken is gone from the Place: the
// holder owes no leave for it.
func (p *Place) Take(req core.AcquireRequest, now time.Time) (fence uint64, left time.Duration, ok bool) {
	if !req.Unshared || p.Grant <= p.Floor || p.Sent.At.IsZero() || !Same(p.Sent.Req, req) {
		return 0, 0, false
	}
	waited := now.Sub(p.Sent.At)
	if waited < 0 || waited >= req.TTL/MaxTakeAge {
		return 0, 0, false
	}
	fence = p.Grant
	p.Queued, p.Floor, p.Grant = false, fence, 0
	return fence, req.TTL - waited, true
}

// Tries counts a Store's tries in flight by holder (a driver's own id of a holder on a key). The
// zero Tries is empty and ready; it is not safe for concurrent use (the driver's lock guards it).
type Tries struct{ n map[string]int }

// Begin counts a try of id, about to be sent.
func (t *Tries) Begin(id string) {
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[id]++
}

// End counts a try of id, counted by Begin, as answered or given up.
func (t *Tries) End(id string) {
	if t.n[id]--; t.n[id] <= 0 {
		delete(t.n, id)
	}
}

// Busy reports whether a try of id is in flight.
func (t *Tries) Busy(id string) bool { return t.n[id] > 0 }

// Any reports whether any try is in flight.
func (t *Tries) Any() bool { return len(t.n) > 0 }

package rediscore

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"
)

// acquireCall is one try of the acquire script: the request and, for a try that will wait
// (req.Wait > 0), what its place in the line needs.
type acquireCall struct {
	req    core.AcquireRequest
	fences fences
	// listens says a PUBLISH on the Store's channel for the key counts the Store while it listens
	// (not on a Cluster, and only once its subscription was confirmed before the try): a release
	// then passes over the place when the PUBLISH reaches nobody.
	listens bool
	// try names the try (a string: see tryID), so that a leave sent after it gave up keeps it out
	// of the line should it arrive later; a try that waits always has one, and the script takes
	// the Store's channel, where a grant from the line to the holder is published, from it.
	try any
	// overtakes names the holder's leaves of the key, sent before this try, whose replies did not
	// come (space-separated ids; "": none): the try keeps them from doing anything should they
	// arrive after it (see leaves.overtaken).
	overtakes string
}

// fences are the least fences an acquire gives (zero: no floor): grant to a new grant, held to a
// lease the holder already holds. See core.FenceRaiser.
type fences struct{ grant, held uint64 }

// argList is a script's ARGV, built by value: run copies it into the call, which is then the only
// slice a call allocates.
type argList struct {
	v [maxArgs]any
	n int
}

// maxArgs is the most values an argList holds.
const maxArgs = 13

// newArgs returns an argList of vs.
func newArgs(vs ...any) (a argList) {
	a.n = copy(a.v[:], vs)
	return a
}

// values returns the values of a.
func (a *argList) values() []any { return a.v[:a.n] }

// acquireArgs returns the ARGV of the acquire script (see acquire.lua), with its durations boxed
// by d: holder and TTL, then wait, try id, listens, permits, limit, value, the two fence floors,
// the lock delay, and the leaves the try overtakes with their hold, but only up to the last that
// is not its default. Each value the server reads costs it about as much as a hash write, so an
// uncontended try of a lock sends two, four when it would wait; a request with a lock delay
// sends eleven, so that one without pays nothing for it.
func acquireArgs(c acquireCall, d *durations) argList {
	req := c.req
	a := newArgs(req.Holder, d.box(req.TTL, true))
	switch {
	case c.overtakes != "":
		a.n = 13
		a.v[11], a.v[12] = c.overtakes, tryHoldMs
	case req.LockDelay != 0:
		a.n = 11
	case c.fences.grant != 0:
		a.n = 10
	case c.fences.held != 0:
		a.n = 9
	case req.Value != "":
		a.n = 8
	case req.Limit != 1:
		a.n = 7
	case req.Permits != 1:
		a.n = 6
	case c.listens:
		a.n = 5
	case c.try != nil:
		a.n = 4
	case req.Wait > 0:
		a.n = 3
	default:
		return a
	}
	listens := zero
	if c.listens {
		listens = one
	}
	copy(a.v[2:], []any{d.box(req.Wait, false), orEmpty(c.try), listens, req.Permits, req.Limit, req.Value,
		decimal(c.fences.held), decimal(c.fences.grant), d.box(req.LockDelay, true)})
	return a
}

// orEmpty returns v, or "" for nil.
func orEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}

// zero and one are "0" and "1" as ARGV values, boxed once.
var zero, one any = "0", "1"

// decimal returns n as an ARGV value, which the drivers send in decimal; zero, the common case,
// costs no allocation.
func decimal(n uint64) any {
	if n == 0 {
		return zero
	}
	return n
}

// durations boxes the durations a Store sends, in whole ms (see ms), keeping the TTLs: a call
// whose TTL, or wait, is a TTL sent before boxes nothing. Safe for concurrent use.
type durations struct {
	slots [8]atomic.Pointer[boxedMs]
}

// boxedMs is a duration in ms, and boxed.
type boxedMs struct {
	ms  int64
	box any
}

// box returns ms(d) as an ARGV value; keep keeps it for the calls after.
func (c *durations) box(d time.Duration, keep bool) any {
	n := ms(d)
	slot := &c.slots[n%int64(len(c.slots))]
	if b := slot.Load(); b != nil && b.ms == n {
		return b.box
	}
	if !keep {
		return n
	}
	b := &boxedMs{ms: n, box: n}
	slot.Store(b)
	return b.box
}

// extendArgs returns the ARGV of the extend script, with its TTL boxed by d.
func extendArgs(req core.ExtendRequest, d *durations) argList {
	return newArgs(req.Holder, d.box(req.TTL, true))
}

// releaseArgs returns the ARGV of the release script: the holder, and the fence when it is not
// 0 (any).
func releaseArgs(req core.ReleaseRequest) argList {
	if req.Fence == 0 {
		return newArgs(req.Holder)
	}
	return newArgs(req.Holder, req.Fence)
}

// watchArgs returns the ARGV of the watch script: how long the key is watched from now.
func watchArgs(life time.Duration) argList {
	return newArgs(msValue(life))
}

// leaveArgs returns the ARGV of the leave script, for holder, which gave up waiting after a
// refusal that reported floor as the key's last fence.
func leaveArgs(holder string, floor uint64) argList {
	return newArgs(holder, decimal(floor))
}

// withLeaveID returns the leave script's ARGV a with the leave's own id (see leave.lua) after
// them, and an empty try id and hold before it when a has none.
func withLeaveID(a argList, id string) argList {
	if a.n < 4 {
		a.v[2], a.v[3], a.n = "", zero, 4
	}
	a.v[4], a.n = id, 5
	return a
}

// tryHold is how long a leave keeps the try it undoes from taking a place, should the try reach
// the server after it: longer than any try stays in flight.
const tryHold = time.Minute

// leaveTryArgs returns the ARGV of the leave script for a try (named try in the acquire script's
// ARGV) whose caller gave up before its reply came: it leaves the line, and the try, should it
// arrive later, takes no place.
func leaveTryArgs(holder string, try any) argList {
	return newArgs(holder, zero, try, tryHoldMs)
}

// tryHoldMs is tryHold as an ARGV value.
var tryHoldMs = msValue(tryHold)

// msValue returns ms(d) as an ARGV value.
func msValue(d time.Duration) any { return ms(d) }

// tryID returns the name of a try: the Store's id, ':', and the try's number n in base 36.
func tryID(store string, n uint64) string {
	var buf [64]byte
	b := append(buf[:0], store...)
	b = append(b, ':')
	return string(strconv.AppendUint(b, n, 36))
}

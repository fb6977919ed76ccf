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
	// arrive after it (see unsureLeaves.overtaken).
	overtakes string
}

// fences are the least fences an acquire gives (zero: no floor): grant to a new grant, held to a
// lease the holder already holds. See core.FenceRaiser.
type fences struct{ grant, held uint64 }

// The scripts' arguments, by name: each script's ARGV in order, one constant an argument, and
// its name in the script's Lua (the params of each, which scripts.go writes into the Lua where
// its functions take them). This is the one list of their order: the Go side fills an argList by
// these indices, and the Lua reads each as a named parameter.
const (
	// acquire (see acquire.lua)
	acqHolder     = iota // the holder
	acqTTL               // the lease's TTL in ms
	acqWait              // how long the try waits in the line, in ms (0: it does not)
	acqTry               // the try's id (see tryID; "": none)
	acqListens           // "1" when a PUBLISH on the Store's channel counts it (see acquireCall.listens)
	acqPermits           // the permits asked for
	acqLimit             // the key's limit as the caller has it
	acqValue             // the lease's value
	acqMinFence          // the least fence of the lease, new or held (see fences.held)
	acqFenceFloor        // the least fence of a new grant (see fences.grant)
	acqLockDelay         // the lease's lock delay in ms
	acqOvertakes         // the ids of the holder's leaves the try overtakes (space-separated)
	acqHold              // how long those leaves are kept out, in ms
	acquireArgc
)

// acquireParams names the acquire script's arguments, indexed as above.
var acquireParams = [acquireArgc]string{
	acqHolder: "holder", acqTTL: "ttl_ms", acqWait: "wait_ms", acqTry: "try", acqListens: "listens",
	acqPermits: "permits", acqLimit: "limit", acqValue: "value", acqMinFence: "min_fence",
	acqFenceFloor: "fence_floor", acqLockDelay: "lock_delay", acqOvertakes: "overtakes", acqHold: "hold_ms",
}

const (
	// extend (see extend.lua)
	extHolder = iota // the holder
	extTTL           // the lease's new TTL in ms
	extendArgc
)

// extendParams names the extend script's arguments.
var extendParams = [extendArgc]string{extHolder: "holder", extTTL: "ttl_ms"}

const (
	// release (see release.lua)
	relHolder = iota // the holder
	relFence         // the fence of the lease to end (absent or 0: any)
	releaseArgc
)

// releaseParams names the release script's arguments.
var releaseParams = [releaseArgc]string{relHolder: "holder", relFence: "fence_asked"}

const (
	// leave (see leave.lua)
	leaveHolder = iota // the holder that gives up
	leaveFloor         // the key's last fence at its refused try
	leaveTry           // the id of a try given up before its reply came ("": none)
	leaveHold          // how long that try is kept out, in ms
	leaveID            // the leave's own id, which a later try may have overtaken
	leaveArgc
)

// leaveParams names the leave script's arguments.
var leaveParams = [leaveArgc]string{leaveHolder: "holder", leaveFloor: "floor", leaveTry: "try", leaveHold: "hold_ms", leaveID: "leave_id"}

const (
	// watch (see watch.lua)
	watchLifeMs = iota // how long the key is watched from now, in ms
	watchArgCount
)

// watchParams names the watch script's arguments.
var watchParams = [watchArgCount]string{watchLifeMs: "life_ms"}

// argList is a script's ARGV, built by value: run copies it into the call, which is then the only
// slice a call allocates.
type argList struct {
	v [maxArgs]any
	n int
}

// maxArgs is the most values an argList holds.
const maxArgs = acquireArgc

// newArgs returns an argList of vs.
func newArgs(vs ...any) (a argList) {
	a.n = copy(a.v[:], vs)
	return a
}

// values returns the values of a.
func (a *argList) values() []any { return a.v[:a.n] }

// set sets the argument at index i to v.
func (a *argList) set(i int, v any) { a.v[i] = v }

// acquireArgs returns the ARGV of the acquire script (see acquire.lua), with its durations boxed
// by d: holder and TTL, then the others in their order, but only up to the last that is not its
// default. Each value the server reads costs it about as much as a hash write, so an uncontended
// try of a lock sends two, four when it would wait; a request with a lock delay sends eleven,
// so that one without pays nothing for it.
func acquireArgs(c acquireCall, d *durations) argList {
	req := c.req
	var a argList
	a.set(acqHolder, req.Holder)
	a.set(acqTTL, d.box(req.TTL, true))
	switch {
	case c.overtakes != "":
		a.n = acqHold + 1
		a.set(acqOvertakes, c.overtakes)
		a.set(acqHold, tryHoldMs)
	case req.LockDelay != 0:
		a.n = acqLockDelay + 1
	case c.fences.grant != 0:
		a.n = acqFenceFloor + 1
	case c.fences.held != 0:
		a.n = acqMinFence + 1
	case req.Value != "":
		a.n = acqValue + 1
	case req.Limit != 1:
		a.n = acqLimit + 1
	case req.Permits != 1:
		a.n = acqPermits + 1
	case c.listens:
		a.n = acqListens + 1
	case c.try != nil:
		a.n = acqTry + 1
	case req.Wait > 0:
		a.n = acqWait + 1
	default:
		a.n = acqTTL + 1
		return a
	}
	listens := zero
	if c.listens {
		listens = one
	}
	a.set(acqWait, d.box(req.Wait, false))
	a.set(acqTry, orEmpty(c.try))
	a.set(acqListens, listens)
	a.set(acqPermits, req.Permits)
	a.set(acqLimit, req.Limit)
	a.set(acqValue, req.Value)
	a.set(acqMinFence, decimal(c.fences.held))
	a.set(acqFenceFloor, decimal(c.fences.grant))
	a.set(acqLockDelay, d.box(req.LockDelay, true))
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
func extendArgs(req core.ExtendRequest, d *durations) (a argList) {
	a.set(extHolder, req.Holder)
	a.set(extTTL, d.box(req.TTL, true))
	a.n = extendArgc
	return a
}

// releaseArgs returns the ARGV of the release script: the holder, and the fence when it is not
// 0 (any).
func releaseArgs(req core.ReleaseRequest) (a argList) {
	a.set(relHolder, req.Holder)
	a.n = relHolder + 1
	if req.Fence != 0 {
		a.set(relFence, req.Fence)
		a.n = releaseArgc
	}
	return a
}

// watchArgs returns the ARGV of the watch script: how long the key is watched from now.
func watchArgs(life time.Duration) (a argList) {
	a.set(watchLifeMs, msValue(life))
	a.n = watchArgCount
	return a
}

// leaveArgs returns the ARGV of the leave script, for holder, which gave up waiting after a
// refusal that reported floor as the key's last fence.
func leaveArgs(holder string, floor uint64) (a argList) {
	a.set(leaveHolder, holder)
	a.set(leaveFloor, decimal(floor))
	a.n = leaveFloor + 1
	return a
}

// withLeaveID returns the leave script's ARGV a with the leave's own id (see leave.lua) after
// them, and an empty try id and hold before it when a has none.
func withLeaveID(a argList, id string) argList {
	if a.n <= leaveHold {
		a.set(leaveTry, "")
		a.set(leaveHold, zero)
	}
	a.set(leaveID, id)
	a.n = leaveArgc
	return a
}

// tryHold is how long a leave keeps the try it undoes from taking a place, should the try reach
// the server after it: longer than any try stays in flight.
const tryHold = time.Minute

// leaveTryArgs returns the ARGV of the leave script for a try (named try in the acquire script's
// ARGV) whose caller gave up before its reply came: it leaves the line, and the try, should it
// arrive later, takes no place.
func leaveTryArgs(holder string, try any) (a argList) {
	a.set(leaveHolder, holder)
	a.set(leaveFloor, zero)
	a.set(leaveTry, try)
	a.set(leaveHold, tryHoldMs)
	a.n = leaveHold + 1
	return a
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

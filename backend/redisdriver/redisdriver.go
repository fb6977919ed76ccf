// Package redisdriver holds what Leasehold's Redis drivers share, whatever client they use: the
// Lua scripts (one copy, embedded), the key layout, the decoding of script replies into core
// results, and the subscription bookkeeping that turns wake messages into wake-ups. The drivers
// backend/goredis and backend/valkey only move bytes.
//
// # Key layout
//
// A resource key K under prefix P is stored in six Redis keys: P{K'}:leases (a sorted set of
// holder → expiry in server milliseconds), P{K'}:holders (a hash of holder → "permits fence",
// with " q" after a grant from the line not taken yet), P{K'}:meta (a hash with the last fence,
// the latest limit and the line's counter), P{K'}:queue (a sorted set, the line of waiters in
// arrival order), P{K'}:waiting (a hash of waiter → its request) and P{K'}:left (a sorted set of
// the ids of tries given up before their reply came, for a minute), where K' is K with '%', '{'
// and '}' percent-encoded. K' is the hash tag, so the six keys (and each Store's channel for the key, P{K'}:granted:<store id>) share
// one Redis Cluster slot and one script can touch them all; the encoding keeps any user key in
// one slot and distinct from every other.
//
// # Scripts
//
// Each Store operation is one script call (EVALSHA, falling back to EVAL once per server). The
// scripts take the time from the server (TIME) and purge expired leases. Someone else's data
// under the prefix is reported (an error naming the key and its type) and left untouched: each
// key's first command is one that Redis refuses on a wrong type before it changes anything, and
// only then is the key's type looked up, to name it. User values travel only as KEYS and ARGV.
//
// # Handing over to waiters
//
// A refused Acquire that will wait (AcquireRequest.Wait > 0) takes a place in the key's line,
// with its request and the channel of its Store. The line is strictly FIFO: free permits go to
// its head first, which waits until its permits are free, and no newcomer passes it. A release
// grants the permits it frees to the head of the line in the same script, and publishes each
// grant on the channel of the waiter's Store alone; the releasing Store wakes its own waiters
// from the reply without waiting for the message. Only the waiters granted wake, and no other
// Store hears of it; idle waiters send nothing. A woken waiter's next Acquire takes the grant and
// renews it for its full TTL. A grant published to nobody (the waiter's process died and its
// connection closed) is undone, and that Store's places dropped, in the same script, once the
// place was checked (its Store's subscription confirmed before the try; never on a Cluster,
// where PUBLISH counts one node's subscribers). A waiter that gives up leaves the line (one more
// script call, in the background; a closing Store sends those its waiters owe before Close
// returns), passing a grant it has not taken to the next in line; so does a try that failed or
// was canceled in flight, which the leave also keeps out of the line should it arrive later. A
// Store gives back a grant for a caller that gave up before enrolling, a second after it.
package redisdriver

import (
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
)

// DefaultPrefix is the key prefix used unless a driver is given another.
const DefaultPrefix = "leasehold:"

var (
	//go:embed common.lua
	common string
	//go:embed acquire.lua
	acquireBody string
	//go:embed extend.lua
	extendBody string
	//go:embed release.lua
	releaseBody string
	//go:embed inspect.lua
	inspectBody string
	//go:embed leave.lua
	leaveBody string
	//go:embed guard.lua
	guard string
)

// The scripts' full sources: the shared prelude, then each operation's body as a function run
// under the guard.
var (
	AcquireScript = script(acquireBody)
	ExtendScript  = script(extendBody)
	ReleaseScript = script(releaseBody)
	InspectScript = script(inspectBody)
	LeaveScript   = script(leaveBody)
)

func script(body string) string { return common + "local function main()\n" + body + guard }

// Layout maps resource keys to Redis keys and channels under a prefix.
type Layout struct {
	prefix string
}

// NewLayout returns the layout under prefix. The prefix must not contain '{' or '}', which would
// change the hash tag.
func NewLayout(prefix string) (Layout, error) {
	if strings.ContainsAny(prefix, "{}") {
		return Layout{}, fmt.Errorf("%w: prefix %q: must not contain '{' or '}'", core.ErrInvalid, prefix)
	}
	return Layout{prefix: prefix}, nil
}

var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func (l Layout) tag(key string) string {
	return l.prefix + "{" + keyEscaper.Replace(key) + "}:"
}

// Keys returns the Redis keys of a resource key, in the order the scripts take them.
func (l Layout) Keys(key string) []string {
	t := l.tag(key)
	return []string{t + "leases", t + "holders", t + "meta", t + "queue", t + "waiting", t + "left"}
}

// Channel returns the channel on which the Store with id store hears of leases on key granted to
// its waiters from the key's line.
func (l Layout) Channel(key, store string) string { return l.tag(key) + "granted:" + store }

// maxMs bounds every duration sent to a script: far above any TTL or wait a caller means
// (35,000 years), and far below 2^53, so that the scripts' arithmetic on doubles stays exact.
const maxMs = 1 << 50

// ms rounds a duration up to whole milliseconds, the server's resolution (a lease never ends
// before its TTL), and bounds it to [0, maxMs] without overflowing.
func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return min(int64(d/time.Millisecond)+min(int64(d%time.Millisecond), 1), maxMs)
}

// Fences are the least fences an acquire gives: Grant to a new grant, Held to a lease the holder
// already holds (see core.FenceRaiser). Zero is no floor.
type Fences struct{ Grant, Held uint64 }

// AcquireArgs returns the ARGV of the acquire script; channel is where a grant from the line is
// to be published, used when req.Wait > 0, and listens says whether a PUBLISH there counts the
// Store while it listens (not on a Cluster).
func AcquireArgs(req core.AcquireRequest, f Fences, channel string, listens bool, try string) []any {
	l := "0"
	if listens {
		l = "1"
	}
	args := []any{req.Holder, req.Permits, req.Limit, ms(req.TTL), strconv.FormatUint(f.Held, 10), ms(req.Wait), channel,
		strconv.FormatUint(f.Grant, 10), l}
	if try != "" {
		args = append(args, try)
	}
	return args
}

// ExtendArgs returns the ARGV of the extend script.
func ExtendArgs(req core.ExtendRequest) []any {
	return []any{req.Holder, ms(req.TTL)}
}

// ReleaseArgs returns the ARGV of the release script.
func ReleaseArgs(req core.ReleaseRequest) []any {
	return []any{req.Holder, strconv.FormatUint(req.Fence, 10)}
}

// LeaveArgs returns the ARGV of the leave script, for holder, which gave up waiting after a
// refusal that reported floor as the key's last fence.
func LeaveArgs(holder string, floor uint64) []any {
	return []any{holder, strconv.FormatUint(floor, 10)}
}

// tryHold is how long a leave keeps the try it undoes from taking a place, should the try reach
// the server after it: longer than any try stays in flight.
const tryHold = time.Minute

// LeaveTryArgs returns the ARGV of the leave script for a try (named try in the acquire script's
// ARGV) whose caller gave up before its reply came: it leaves the line, and the try, should it
// arrive later, takes no place.
func LeaveTryArgs(holder, try string) []any {
	return []any{holder, "0", try, ms(tryHold)}
}

// Reply is a script reply decoded by a driver: a []any of int64 and string values, or an int64.
type Reply = any

var errReply = errors.New("unexpected script reply")

// ints returns the leading int64 values of an array reply, at least least of them.
func ints(r Reply, least int) ([]int64, error) {
	arr, ok := r.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %v", errReply, r)
	}
	out := make([]int64, 0, len(arr))
	for _, v := range arr {
		n, ok := v.(int64)
		if !ok {
			break
		}
		out = append(out, n)
	}
	if len(out) < least {
		return nil, fmt.Errorf("%w: %v", errReply, r)
	}
	return out, nil
}

// ParseAcquire decodes the acquire script's reply. On a refusal, last is the key's last fence
// at the time: a lease the line of waiters grants the holder afterwards has a higher one.
func ParseAcquire(r Reply) (res core.AcquireResult, last uint64, err error) {
	v, err := ints(r, 2)
	if err != nil {
		return core.AcquireResult{}, 0, err
	}
	switch v[0] {
	case 1:
		return core.AcquireResult{Granted: true, Fence: uint64(v[1])}, 0, nil
	case 0:
		if len(v) > 2 {
			last = uint64(v[2])
		}
		return core.AcquireResult{RetryAfter: time.Duration(v[1]) * time.Millisecond}, last, nil
	default:
		return core.AcquireResult{}, 0, fmt.Errorf("%w: holder already holds %d permits on the key", core.ErrInvalid, v[1])
	}
}

// ParseExtend decodes the extend script's reply; a lease not held is an error wrapping
// core.ErrLost.
func ParseExtend(r Reply) (core.ExtendResult, error) {
	v, err := ints(r, 1)
	if err != nil {
		return core.ExtendResult{}, err
	}
	if v[0] == 0 {
		return core.ExtendResult{}, core.ErrLost
	}
	if len(v) < 4 {
		return core.ExtendResult{}, fmt.Errorf("%w: %v", errReply, r)
	}
	return core.ExtendResult{Permits: int(v[1]), Fence: uint64(v[2]), Limit: int(v[3])}, nil
}

// ParseRelease decodes the release script's reply: whether the holder held the lease, and the
// leases the line of waiters was granted with the freed permits.
func ParseRelease(r Reply) (held bool, grants []Grant, err error) {
	arr, ok := r.([]any)
	if !ok || len(arr) < 1 {
		return false, nil, fmt.Errorf("%w: %v", errReply, r)
	}
	n, ok := arr[0].(int64)
	if !ok {
		return false, nil, fmt.Errorf("%w: %v", errReply, r)
	}
	grants, err = ParseGrants(arr[1:])
	return n > 0, grants, err
}

// Grant is a lease that a release (or a waiter giving up) granted to a waiter in the line.
type Grant struct {
	Holder string
	Fence  uint64
}

// ParseGrants decodes the grants in a script's reply: {holder, fence, ...}.
func ParseGrants(r Reply) ([]Grant, error) {
	arr, ok := r.([]any)
	if !ok || len(arr)%2 != 0 {
		return nil, fmt.Errorf("%w: %v", errReply, r)
	}
	var gs []Grant
	for i := 0; i < len(arr); i += 2 {
		h, ok1 := arr[i].(string)
		f, ok2 := arr[i+1].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: %v", errReply, r)
		}
		gs = append(gs, Grant{Holder: h, Fence: uint64(f)})
	}
	return gs, nil
}

// ParseMessage decodes the grants published on a key's channel: each is the holder as a
// netstring ("<length>:<holder>"), then the fence, then a space.
func ParseMessage(payload string) ([]Grant, error) {
	var gs []Grant
	for rest := payload; rest != ""; {
		lenText, tail, ok := strings.Cut(rest, ":")
		n, err := strconv.Atoi(lenText)
		if !ok || err != nil || n < 0 || n > len(tail) {
			return nil, fmt.Errorf("%w: message %q", errReply, payload)
		}
		holder := tail[:n]
		fenceText, after, ok := strings.Cut(tail[n:], " ")
		fence, err := strconv.ParseUint(fenceText, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%w: message %q", errReply, payload)
		}
		gs = append(gs, Grant{Holder: holder, Fence: fence})
		rest = after
	}
	return gs, nil
}

// ParseInspect decodes the inspect script's reply.
func ParseInspect(r Reply) (core.Snapshot, error) {
	arr, ok := r.([]any)
	if !ok || len(arr) < 1 || (len(arr)-1)%4 != 0 {
		return core.Snapshot{}, fmt.Errorf("%w: %v", errReply, r)
	}
	limit, _ := arr[0].(int64)
	snap := core.Snapshot{Limit: int(limit), Leases: make([]core.LeaseInfo, 0, (len(arr)-1)/4)}
	for i := 1; i < len(arr); i += 4 {
		holder, ok1 := arr[i].(string)
		permits, ok2 := arr[i+1].(int64)
		fence, ok3 := arr[i+2].(int64)
		ttl, ok4 := arr[i+3].(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return core.Snapshot{}, fmt.Errorf("%w: %v", errReply, r)
		}
		snap.Leases = append(snap.Leases, core.LeaseInfo{Holder: holder, Permits: int(permits), Fence: uint64(fence), TTL: time.Duration(ttl) * time.Millisecond})
	}
	sortByFence(snap.Leases)
	return snap, nil
}

func sortByFence(ls []core.LeaseInfo) {
	slices.SortFunc(ls, func(a, b core.LeaseInfo) int { return cmp.Compare(a.Fence, b.Fence) })
}

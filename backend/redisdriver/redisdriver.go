// Package redisdriver holds what Leasehold's Redis drivers share, whatever client they use: the
// Lua scripts (one copy, embedded), the key layout, the decoding of script replies into core
// results, and the subscription bookkeeping that turns wake messages into wake-ups. The drivers
// backend/goredis and backend/valkey only move bytes.
//
// # Key layout
//
// A resource key K under prefix P is stored in five Redis keys: P{K'}:leases (a sorted set of
// holder → expiry in server milliseconds), P{K'}:holders (a hash of holder → "permits fence"),
// P{K'}:meta (a hash with the last fence, the latest limit and the line's counters),
// P{K'}:queue (a sorted set, the line of waiters in arrival order) and P{K'}:waiting (a hash of
// waiter → "permits deadline"), where K' is K with '%', '{' and '}' percent-encoded. K' is the
// hash tag, so the five keys (and the wake channel P{K'}:released) share one Redis Cluster slot
// and one script can touch them all; the encoding keeps any user key in one slot and distinct
// from every other.
//
// # Scripts
//
// Each Store operation is one script call (EVALSHA, falling back to EVAL once per server). The
// scripts take the time from the server (TIME), purge expired leases, and check the types of the
// keys before writing anything, so someone else's data under the prefix is reported and left
// untouched. User values travel only as KEYS and ARGV.
//
// # Waking waiters
//
// A refused Acquire that will wait (AcquireRequest.Wait > 0) takes a place in the key's line.
// A release reserves the permits it frees, for ClaimWindow, for the waiters at the head of the
// line that they serve, and publishes their holder ids on the key's channel: only those waiters
// wake, in whichever process they are, and only they may take the reserved permits. The
// releasing Store also wakes its own woken waiters from the script's reply, without waiting for
// the message. A waiter that gives up leaves the line (one more script call), passing a
// reservation made for it to the next in line. Idle waiters send nothing.
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
)

// The scripts' full sources: the shared prelude followed by each operation.
var (
	AcquireScript = common + acquireBody
	ExtendScript  = common + extendBody
	ReleaseScript = common + releaseBody
	InspectScript = common + inspectBody
	LeaveScript   = common + leaveBody
)

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
	return []string{t + "leases", t + "holders", t + "meta", t + "queue", t + "waiting"}
}

// Channel returns the channel the release script publishes freed permits of key on.
func (l Layout) Channel(key string) string { return l.tag(key) + "released" }

// ms rounds a TTL up to whole milliseconds, the server's resolution: a lease never ends
// before its TTL.
func ms(ttl time.Duration) int64 { return int64((ttl + time.Millisecond - 1) / time.Millisecond) }

// ClaimWindow is how long a release reserves the permits it frees for the waiters it wakes.
// A woken waiter tries again within a round trip or two; the window only bounds how long
// permits stay idle when the woken waiter's process died before it could try.
const ClaimWindow = 500 * time.Millisecond

// AcquireArgs returns the ARGV of the acquire script.
func AcquireArgs(req core.AcquireRequest) []any {
	return []any{req.Holder, req.Permits, req.Limit, ms(req.TTL), strconv.FormatUint(req.MinFence, 10), ms(req.Wait)}
}

// ExtendArgs returns the ARGV of the extend script.
func ExtendArgs(req core.ExtendRequest) []any {
	return []any{req.Holder, ms(req.TTL)}
}

// ReleaseArgs returns the ARGV of the release script, and of the leave script (a waiter that
// gives up its place in the line).
func (l Layout) ReleaseArgs(key, holder string) []any {
	return []any{holder, l.Channel(key), ms(ClaimWindow)}
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

// ParseAcquire decodes the acquire script's reply.
func ParseAcquire(r Reply) (core.AcquireResult, error) {
	v, err := ints(r, 2)
	if err != nil {
		return core.AcquireResult{}, err
	}
	switch v[0] {
	case 1:
		return core.AcquireResult{Granted: true, Fence: uint64(v[1])}, nil
	case 0:
		return core.AcquireResult{RetryAfter: time.Duration(v[1]) * time.Millisecond}, nil
	default:
		return core.AcquireResult{}, fmt.Errorf("%w: holder already holds %d permits on the key", core.ErrInvalid, v[1])
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
// wake it made (see ParseWake).
func ParseRelease(r Reply) (held bool, wake Wake, err error) {
	arr, ok := r.([]any)
	if !ok || len(arr) < 1 {
		return false, Wake{}, fmt.Errorf("%w: %v", errReply, r)
	}
	n, ok := arr[0].(int64)
	if !ok {
		return false, Wake{}, fmt.Errorf("%w: %v", errReply, r)
	}
	wake, err = ParseWake(arr[1:])
	return n > 0, wake, err
}

// Wake is what a release (or a waiter giving up its place) reserved permits for: the holders
// woken, and the wake's number, which orders the wakes on a key so that one reported twice
// (in the script's reply, then by the channel) wakes its waiter once.
type Wake struct {
	ID      int64
	Holders []string
}

// ParseWake decodes the wake part of a script's reply: {} or {id, holder...}.
func ParseWake(r Reply) (Wake, error) {
	arr, ok := r.([]any)
	if !ok {
		return Wake{}, fmt.Errorf("%w: %v", errReply, r)
	}
	if len(arr) == 0 {
		return Wake{}, nil
	}
	id, ok := arr[0].(int64)
	if !ok {
		return Wake{}, fmt.Errorf("%w: %v", errReply, r)
	}
	w := Wake{ID: id, Holders: make([]string, 0, len(arr)-1)}
	for _, v := range arr[1:] {
		h, ok := v.(string)
		if !ok {
			return Wake{}, fmt.Errorf("%w: %v", errReply, r)
		}
		w.Holders = append(w.Holders, h)
	}
	return w, nil
}

// ParseMessage decodes a wake published on a key's channel: "<id> " followed by each holder as
// a netstring, "<length>:<holder>".
func ParseMessage(payload string) (Wake, error) {
	idText, rest, ok := strings.Cut(payload, " ")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !ok || err != nil {
		return Wake{}, fmt.Errorf("%w: message %q", errReply, payload)
	}
	w := Wake{ID: id}
	for rest != "" {
		lenText, tail, ok := strings.Cut(rest, ":")
		n, err := strconv.Atoi(lenText)
		if !ok || err != nil || n < 0 || n > len(tail) {
			return Wake{}, fmt.Errorf("%w: message %q", errReply, payload)
		}
		w.Holders = append(w.Holders, tail[:n])
		rest = tail[n:]
	}
	return w, nil
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

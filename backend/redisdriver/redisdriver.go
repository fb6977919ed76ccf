// Package redisdriver holds what Leasehold's Redis drivers share, whatever client they use: the
// Lua scripts (one copy, embedded), the key layout, the decoding of script replies into core
// results, and the subscription bookkeeping that turns release messages into wake-ups. The
// drivers backend/goredis and backend/valkey only move bytes.
//
// # Key layout
//
// A resource key K under prefix P is stored in three Redis keys, P{K'}:leases (a sorted set of
// holder → expiry in server milliseconds), P{K'}:holders (a hash of holder → "permits fence") and
// P{K'}:meta (a hash with the last fence and the latest limit), where K' is K with '%', '{' and
// '}' percent-encoded. K' is the hash tag, so the three keys (and the release channel
// P{K'}:released) share one Redis Cluster slot and one script can touch them all; the encoding
// keeps any user key in one slot and distinct from every other.
//
// # Scripts
//
// Each Store operation is one script call (EVALSHA, falling back to EVAL once per server). The
// scripts take the time from the server (TIME), purge expired leases, and check the types of the
// keys before writing anything, so someone else's data under the prefix is reported and left
// untouched. User values travel only as KEYS and ARGV.
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
)

// The scripts' full sources: the shared prelude followed by each operation.
var (
	AcquireScript = common + acquireBody
	ExtendScript  = common + extendBody
	ReleaseScript = common + releaseBody
	InspectScript = common + inspectBody
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
	return []string{t + "leases", t + "holders", t + "meta"}
}

// Channel returns the channel the release script publishes freed permits of key on.
func (l Layout) Channel(key string) string { return l.tag(key) + "released" }

// ms rounds a TTL up to whole milliseconds, the server's resolution: a lease never ends
// before its TTL.
func ms(ttl time.Duration) int64 { return int64((ttl + time.Millisecond - 1) / time.Millisecond) }

// AcquireArgs returns the ARGV of the acquire script.
func AcquireArgs(req core.AcquireRequest) []any {
	return []any{req.Holder, req.Permits, req.Limit, ms(req.TTL), strconv.FormatUint(req.MinFence, 10)}
}

// ExtendArgs returns the ARGV of the extend script.
func ExtendArgs(req core.ExtendRequest) []any {
	return []any{req.Holder, ms(req.TTL)}
}

// ReleaseArgs returns the ARGV of the release script.
func (l Layout) ReleaseArgs(key, holder string) []any {
	return []any{holder, l.Channel(key)}
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

// ParseRelease decodes the release script's reply: whether the holder held the lease.
func ParseRelease(r Reply) (bool, error) {
	n, ok := r.(int64)
	if !ok {
		return false, fmt.Errorf("%w: %v", errReply, r)
	}
	return n > 0, nil
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

// ParsePermits decodes a release message's payload: the permits freed.
func ParsePermits(payload string) int {
	n, err := strconv.Atoi(payload)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func sortByFence(ls []core.LeaseInfo) {
	slices.SortFunc(ls, func(a, b core.LeaseInfo) int { return cmp.Compare(a.Fence, b.Fence) })
}

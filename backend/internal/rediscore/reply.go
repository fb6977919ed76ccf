package rediscore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
)

// errReply is a script reply or a message this version cannot read.
var errReply = errors.New("unexpected script reply")

// maxInts is the most leading int64 values ints reads of a reply.
const maxInts = 4

// ints returns the leading int64 values of an array reply, up to maxInts of them, and how many
// it read: at least least.
func ints(r any, least int) (v [maxInts]int64, n int, err error) {
	arr, ok := r.([]any)
	if !ok {
		return v, 0, fmt.Errorf("%w: %v", errReply, r)
	}
	for _, e := range arr {
		i, ok := e.(int64)
		if !ok || n == maxInts {
			break
		}
		v[n] = i
		n++
	}
	if n < least {
		return v, 0, fmt.Errorf("%w: %v", errReply, r)
	}
	return v, n, nil
}

// parseAcquire decodes the acquire script's reply to a request for asked permits of limit. On a
// refusal, last is the key's last fence at the time: a lease the line of waiters grants the
// holder afterwards has a higher one. A holder that holds another number of permits is an error
// wrapping core.ErrInvalid; a limit that is not the key's, a *core.LimitMismatchError.
func parseAcquire(r any, asked, limit int) (res core.AcquireResult, last uint64, err error) {
	if fence, ok := r.(int64); ok {
		// Granted: the script replies with the fence alone.
		if fence < 1 {
			return core.AcquireResult{}, 0, fmt.Errorf("%w: %v", errReply, r)
		}
		return core.AcquireResult{Granted: true, Fence: uint64(fence)}, 0, nil
	}
	v, n, err := ints(r, 2)
	if err != nil {
		return core.AcquireResult{}, 0, err
	}
	switch v[0] {
	case 0:
		if n > 2 {
			last = uint64(v[2])
		}
		return core.AcquireResult{RetryAfter: time.Duration(v[1]) * time.Millisecond}, last, nil
	case -2:
		return core.AcquireResult{}, 0, &core.LimitMismatchError{Held: int(v[1]), Requested: limit}
	case -1:
		return core.AcquireResult{}, 0, fmt.Errorf("%w: holder already holds %d permits, asked for %d", core.ErrInvalid, v[1], asked)
	default:
		return core.AcquireResult{}, 0, fmt.Errorf("%w: %v", errReply, r)
	}
}

// parseExtend decodes the extend script's reply; a lease not held is core.ErrLost.
func parseExtend(r any) (core.ExtendResult, error) {
	v, n, err := ints(r, 1)
	if err != nil {
		return core.ExtendResult{}, err
	}
	if v[0] == 0 {
		return core.ExtendResult{}, core.ErrLost
	}
	if n < 4 {
		return core.ExtendResult{}, fmt.Errorf("%w: %v", errReply, r)
	}
	res := core.ExtendResult{Permits: int(v[1]), Fence: uint64(v[2]), Limit: int(v[3])}
	if arr := r.([]any); len(arr) > 4 {
		value, ok := arr[4].(string)
		if !ok {
			return core.ExtendResult{}, fmt.Errorf("%w: %v", errReply, r)
		}
		res.Value = value
	}
	return res, nil
}

// parseRelease decodes the release script's reply: whether the holder held the lease, and the
// leases the line of waiters was granted with the freed permits (the permits freed alone, a
// number, when it was granted none).
func parseRelease(r any) (held bool, grants []grant, err error) {
	if n, ok := r.(int64); ok {
		return n > 0, nil, nil
	}
	arr, ok := r.([]any)
	if !ok || len(arr) < 1 {
		return false, nil, fmt.Errorf("%w: %v", errReply, r)
	}
	n, ok := arr[0].(int64)
	if !ok {
		return false, nil, fmt.Errorf("%w: %v", errReply, r)
	}
	grants, err = grantsIn(arr[1:])
	return n > 0, grants, err
}

// grant is a lease that a release (or a waiter giving up) granted to a waiter in the line.
type grant struct {
	holder string
	fence  uint64
}

// parseGrants decodes the grants in a script's reply: {holder, fence, ...}.
func parseGrants(r any) ([]grant, error) {
	arr, ok := r.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %v", errReply, r)
	}
	return grantsIn(arr)
}

// grantsIn decodes the grants of parseGrants from the reply's values.
func grantsIn(arr []any) ([]grant, error) {
	if len(arr)%2 != 0 {
		return nil, fmt.Errorf("%w: %v", errReply, arr)
	}
	var gs []grant
	for i := 0; i < len(arr); i += 2 {
		h, ok1 := arr[i].(string)
		f, ok2 := arr[i+1].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: %v", errReply, arr)
		}
		gs = append(gs, grant{holder: h, fence: uint64(f)})
	}
	return gs, nil
}

// parseMessage decodes the grants published on a key's channel: each is the holder as a
// netstring ("<length>:<holder>"), then the fence, then a space.
func parseMessage(payload string) ([]grant, error) {
	var gs []grant
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
		gs = append(gs, grant{holder: holder, fence: fence})
		rest = after
	}
	return gs, nil
}

// parseInspect decodes the inspect script's reply: the leases in fence order, the leases in
// their lock delay in fence order, then the line's waiters head first.
func parseInspect(r any) (core.Snapshot, error) {
	arr, ok := r.([]any)
	if !ok || len(arr) < 3 {
		return core.Snapshot{}, fmt.Errorf("%w: %v", errReply, r)
	}
	limit, _ := arr[0].(int64)
	count, _ := arr[1].(int64)
	delayed, _ := arr[2].(int64)
	mid := 3 + 5*int(count)
	end := mid + 4*int(delayed)
	if count < 0 || delayed < 0 || end > len(arr) || (len(arr)-end)%3 != 0 {
		return core.Snapshot{}, fmt.Errorf("%w: %v", errReply, r)
	}
	snap := core.Snapshot{Limit: int(limit), Leases: make([]core.LeaseInfo, 0, count)}
	for i := 3; i < mid; i += 5 {
		holder, ok1 := arr[i].(string)
		permits, ok2 := arr[i+1].(int64)
		fence, ok3 := arr[i+2].(int64)
		ttl, ok4 := arr[i+3].(int64)
		value, ok5 := arr[i+4].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			return core.Snapshot{}, fmt.Errorf("%w: %v", errReply, r)
		}
		snap.Leases = append(snap.Leases, core.LeaseInfo{Holder: holder, Permits: int(permits), Fence: uint64(fence),
			TTL: time.Duration(ttl) * time.Millisecond, Value: value})
	}
	slices.SortFunc(snap.Leases, func(a, b core.LeaseInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	for i := mid; i < end; i += 4 {
		holder, ok1 := arr[i].(string)
		permits, ok2 := arr[i+1].(int64)
		fence, ok3 := arr[i+2].(int64)
		left, ok4 := arr[i+3].(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return core.Snapshot{}, fmt.Errorf("%w: %v", errReply, r)
		}
		snap.Delayed = append(snap.Delayed, core.DelayInfo{Holder: holder, Permits: int(permits), Fence: uint64(fence),
			Left: time.Duration(left) * time.Millisecond})
	}
	slices.SortFunc(snap.Delayed, func(a, b core.DelayInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	for i := end; i < len(arr); i += 3 {
		holder, ok1 := arr[i].(string)
		permits, ok2 := arr[i+1].(int64)
		value, ok3 := arr[i+2].(string)
		if !ok1 || !ok2 || !ok3 {
			return core.Snapshot{}, fmt.Errorf("%w: %v", errReply, r)
		}
		snap.Waiters = append(snap.Waiters, core.WaiterInfo{Holder: holder, Permits: int(permits), Value: value})
	}
	return snap, nil
}

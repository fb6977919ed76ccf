package rediscore

import (
	"testing"
	"time"
)

// Keys returns the Redis keys of key under the default prefix, in the order the scripts take
// them: for the external tests, which look at what the scripts stored.
func Keys(key string) []string { return layout{prefix: defaultPrefix}.keys(key) }

// Channel returns the channel of key under the default prefix for the Store with id store ("*"
// makes a pattern that matches every Store's).
func Channel(key, store string) string { return layout{prefix: defaultPrefix}.channel(key, store) }

// Timings are durations of a Store's grant bookkeeping: how long a channel lingers after its last
// waiter left, how long a grant heard of for a holder not enrolled waits before it is given
// back, and how long such a grant (and a holder's floor) is kept.
type Timings struct {
	Linger, ReclaimAfter, KeepGrants time.Duration
}

// SetTimings makes the Stores made until t ends use tm.
func SetTimings(t testing.TB, tm Timings) {
	testTimings.Store(&timings{linger: tm.Linger, reclaim: tm.ReclaimAfter, keep: tm.KeepGrants})
	t.Cleanup(func() { testTimings.Store(nil) })
}

// OnReclaim has f told, until t ends, of each decision of a reclaim timer of any Store: whether
// it gave the grant of fence to holder on key back to the line. f must not block.
func OnReclaim(t testing.TB, f func(key, holder string, fence uint64, given bool)) {
	testReclaimed.Store(&f)
	t.Cleanup(func() { testReclaimed.Store(nil) })
}

// KeepField names the lease hash's keep entry, whose name carries the layout version.
var KeepField = keepEntry

// LoneTag starts a lone lease's string, and carries the layout version.
var LoneTag = loneTag

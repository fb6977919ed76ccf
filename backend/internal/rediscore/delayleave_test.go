package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestLeaveKeepsTheLockDelayOfAnExpiredLineGrant: a grant the line made to a waiter, with the
// lock delay its place asked for, that expires untaken keeps its permits closed for the delay
// when the waiter then leaves the line: leave gives back only a grant still held.
func TestLeaveKeepsTheLockDelayOfAnExpiredLineGrant(t *testing.T) {
	testenv.SkipShort(t, "waits out a real lease TTL on each driver")
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		s, c, ctx := mk(), raw(t, addr), context.Background()
		const key = "left-delayed"
		mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
		b := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Second, Wait: time.Minute, LockDelay: time.Hour}
		mustAcquire(t, s, b, false) // b's place in the line
		if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
			t.Fatalf("Release(a) = %v, %v", ok, err)
		}
		poll.Until(t, "b's grant, untaken, expired into its lock delay", func() bool { return len(delayedOf(t, s, key)) == 1 })
		script(t, c, srcLeave, key, "b", 0)
		if d := delayedOf(t, s, key); len(d) != 1 || d[0].Holder != "b" {
			t.Errorf("after b left the line: delayed %+v, want b's grant in its lock delay", d)
		}
		mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "c", Permits: 1, Limit: 1, TTL: time.Minute}, false)
	})
}

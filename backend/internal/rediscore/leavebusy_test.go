package rediscore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// busyLoop keeps the server in a script for ARGV[1] µs: past busy-reply-threshold, the server
// answers every other call BUSY, having run none of it.
const busyLoop = `local s = redis.call('TIME') local t0 = s[1] * 1000000 + s[2]
while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] - t0 > tonumber(ARGV[1]) then break end end
return 1`

// TestLeaveAnsweredBusyIsSentAgain: a waiter gives up while the server runs another client's
// long script and answers BUSY (an error reply to a call it did not run); its leave is sent
// again until the server runs it, within the leave's budget, and the place goes: it is not
// listed once the script has ended, and the line serves the next waiter.
func TestLeaveAnsweredBusyIsSentAgain(t *testing.T) {
	t.Parallel()
	eachDriverAlone(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		redistest.Do(addr, "CONFIG", "SET", "busy-reply-threshold", "20")
		s := mk()
		ctx := context.Background()
		const key = "busyleave"
		hold := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
		mustAcquire(t, s, hold, true)
		wr := hold
		wr.Holder, wr.Wait = "w", time.Minute
		mustAcquire(t, s, wr, false)
		w, err := s.Register(ctx, wr)
		if err != nil {
			t.Fatal(err)
		}
		busy := make(chan error, 1)
		go func() {
			_, err := raw(t, addr).Eval(ctx, busyLoop, nil, 600000).Result()
			busy <- err
		}()
		poll.Within(t, 5*time.Second, "the server answering BUSY", func() (string, bool) {
			reply, err := redistest.Do(addr, "PING")
			return reply, err == nil && strings.HasPrefix(reply, "-BUSY")
		})
		w.Close()
		if err := <-busy; err != nil {
			t.Fatal(err)
		}
		snap, err := s.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Waiters) != 0 {
			t.Fatalf("waiters %+v after the waiter left; want none", snap.Waiters)
		}
	})
}

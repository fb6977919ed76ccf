package rediscore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// A server that restarts empty loses the watch entry of holders with everything else. A watch
// that reports itself Reliable again after the reconnect must then hear the next change: a
// waiter or an observer that trusts it sleeps until a change or a lease's expiry, and with the
// entry gone no script publishes (and a successful renewal, not changing reliability, wakes
// nobody).
func TestWatchAfterServerRestart_review17(t *testing.T) {
	for name, driver := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			watcher := driver(t, srv.Addr)
			changer := driver(t, srv.Addr)
			w := reliableWatch(t, watcher, "restarted")
			srv.Restart(t)
			// Subscribed again on the new server, and confirmed.
			pollUntil(t, func() bool {
				out, err := redistest.Do(srv.Addr, "PUBSUB", "CHANNELS", "*changed*")
				return err == nil && strings.HasPrefix(out, "*1") && w.Reliable()
			})
			quiet(w)
			req := core.AcquireRequest{Key: "restarted", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
			pollUntil(t, func() bool { // the changer's connection may need a try to reconnect
				res, err := changer.Acquire(t.Context(), req)
				return err == nil && res.Granted
			})
			if !heard(w) {
				t.Fatal("a grant after the server restarted did not reach a watch that reports itself reliable")
			}
		})
	}
}

// Election.Observe on a Store whose server restarted empty reports the next leader: it trusts
// its watch once the watch says it is reliable again.
func TestObserveAfterServerRestart_review17(t *testing.T) {
	for name, driver := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			observer, campaigner := driver(t, srv.Addr), driver(t, srv.Addr)
			eo, err := primitives.NewElection(observer, "el")
			if err != nil {
				t.Fatal(err)
			}
			ec, err := primitives.NewElection(campaigner, "el")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			seen := eo.Observe(ctx)
			if ld := <-seen; ld != (primitives.Leader{}) {
				t.Fatalf("first leader %+v; want none", ld)
			}
			srv.Restart(t)
			pollUntil(t, func() bool {
				out, err := redistest.Do(srv.Addr, "PUBSUB", "CHANNELS", "*changed*")
				return err == nil && strings.HasPrefix(out, "*1")
			})
			var lease core.Lease
			pollUntil(t, func() bool { // the campaigner's connection may need a try to reconnect
				cctx, ccancel := context.WithTimeout(t.Context(), time.Second)
				defer ccancel()
				lease, err = ec.Campaign(cctx, "after restart")
				return err == nil
			})
			defer lease.Release(context.Background())
			deadline := time.After(10 * time.Second)
			for {
				select {
				case ld := <-seen:
					if ld.Value == "after restart" && ld.Fence == lease.Fence() {
						return
					}
				case <-deadline:
					t.Fatal("Observe did not report the leader elected after the server restarted")
				}
			}
		})
	}
}

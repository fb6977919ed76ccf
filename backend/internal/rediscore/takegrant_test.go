package rediscore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestGrantIsTakenWithoutRoundTripOnlyForTheRefusedRequest: a waiter, woken by the line's grant
// made on its refused request, asks again with a request that differs from that one (here in
// its lock delay, or its TTL): the lease the line made is not the one it asks for, so it is
// taken with a round trip, which grants it as asked and marks it taken on the server, never
// from what the Store heard. The same request, asked again, takes it without one.
func TestGrantIsTakenWithoutRoundTripOnlyForTheRefusedRequest(t *testing.T) {
	t.Parallel()
	cases := map[string]func(*core.AcquireRequest){
		"same":      func(*core.AcquireRequest) {},
		"lockdelay": func(r *core.AcquireRequest) { r.LockDelay = time.Second },
		"ttl":       func(r *core.AcquireRequest) { r.TTL = 2 * time.Minute },
	}
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			for change, differ := range cases {
				key := "take-" + change
				refused := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true}
				a := mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
				w := enroll(t, s, refused)
				drain(w)
				mustRelease(t, s, key, "a", a.Fence) // the reply grants b, and wakes its waiter
				select {
				case <-w.C():
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: b's waiter not woken by the grant", change)
				}
				asked := refused
				differ(&asked)
				res, err := s.Acquire(context.Background(), asked)
				w.Close()
				if err != nil || !res.Granted {
					t.Fatalf("%s: Acquire = %+v, %v; want granted", change, res, err)
				}
				entry, err := redistest.Do(srv.Addr, "HGET", rediscore.Keys(key)[0], ":b")
				if err != nil {
					t.Fatal(err)
				}
				untaken := strings.Contains(entry, " q")
				if untaken != (change == "same") {
					t.Errorf("%s: b's entry %q, taken without a round trip: %v; want that only for the refused request itself", change, entry, untaken)
				}
			}
		})
	}
}

// TestRaiseFenceOfAWokenWaiterRaisesTheLinesGrant: a waiter, woken by the line's grant, asks
// again with RaiseFence above that grant's fence: the grant is not taken from what the Store
// heard, which would report its fence as it is, but with a round trip, which raises it.
func TestRaiseFenceOfAWokenWaiterRaisesTheLinesGrant(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			const key = "raise-taken"
			refused := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true}
			a := mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
			w := enroll(t, s, refused)
			drain(w)
			mustRelease(t, s, key, "a", a.Fence) // the reply grants b, and wakes its waiter
			select {
			case <-w.C():
			case <-time.After(5 * time.Second):
				t.Fatal("b's waiter not woken by the grant")
			}
			fr, ok := s.(core.FenceRaiser)
			if !ok {
				t.Skip("no FenceRaiser")
			}
			raise := a.Fence + 1<<20
			res, err := fr.RaiseFence(context.Background(), refused, raise)
			w.Close()
			if err != nil || !res.Granted || res.Fence < raise {
				t.Fatalf("RaiseFence(%d) = %+v, %v; want granted at %d or above", raise, res, err, raise)
			}
		})
	}
}

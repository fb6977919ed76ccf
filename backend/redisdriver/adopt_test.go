package redisdriver_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// TestAdoptedGrantIsNotTakenBack: a lease the line granted to a waiter, not taken yet,
// is adopted by its holder id (Semaphore.Adopt, an Extend). extend.lua renews it but leaves the
// ' q' mark, so when the original waiter gives up, leave.lua drops the adopted lease and serves
// the next waiter: the adopter and that waiter are inside at once.
func TestAdoptedGrantIsNotTakenBack(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			ctx := context.Background()
			s := mk(t, srv.Addr)
			req := func(h string) core.AcquireRequest {
				return core.AcquireRequest{Key: "adopt", Holder: h, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			}
			a := mustAcquire(t, s, req("a"), true)
			mustAcquire(t, s, req("b"), false)
			wb, err := s.Register(ctx, req("b"))
			if err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, s, req("c"), false)
			wc, err := s.Register(ctx, req("c"))
			if err != nil {
				t.Fatal(err)
			}
			defer wc.Close()
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "adopt", Holder: "a", Fence: a.Fence}); !ok || err != nil {
				t.Fatalf("release: %v, %v", ok, err)
			}
			<-wb.C()
			m, _ := primitives.NewMutex(s, "adopt", primitives.WithTTL(time.Minute))
			adopted, err := m.Adopt(ctx, "b")
			if err != nil {
				t.Fatalf("adopt: %v", err)
			}
			defer adopted.StopRefresh()
			wb.Close()
			waitFor(t, func() bool { return lineLen(t, srv.Addr, "adopt") <= 1 })
			// The leave runs in the background: give it until the line shows c served or not.
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				snap, _ := s.Inspect(ctx, "adopt")
				for _, l := range snap.Leases {
					if l.Holder == "c" {
						t.Fatalf("the adopted lease of b was dropped by b's former waiter's leave and c granted: leases %+v", snap.Leases)
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

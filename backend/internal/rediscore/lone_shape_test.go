package rediscore_test

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestOnlyAMutexsPlainLeaseIsALoneString: on a free key, through both drivers, a Mutex's lease
// (one permit of a limit of 1, no lock delay, no floor above the clock the lease would outlive)
// is a lone string; a semaphore's, a lease with a lock delay, and one whose floor the clock does
// not pass before the lease ends are the lease hash from their grant; and each key leaves nothing once released (and the clock has passed a
// raised fence).
func TestOnlyAMutexsPlainLeaseIsALoneString(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, srv.Addr)
			for _, tc := range []struct {
				what    string
				req     core.AcquireRequest
				floor   time.Duration // above the clock, by AcquireAbove; 0: none
				ttl     time.Duration // 0: a minute
				typ     string
				release bool
			}{
				{"a Mutex's lease", core.AcquireRequest{Permits: 1, Limit: 1}, 0, 0, "string", true},
				{"a Mutex's lease, waiting", core.AcquireRequest{Permits: 1, Limit: 1, Wait: time.Minute}, 0, 0, "string", true},
				{"one permit of a semaphore of 2", core.AcquireRequest{Permits: 1, Limit: 2}, 0, 0, "hash", true},
				{"every permit of a semaphore of 3", core.AcquireRequest{Permits: 3, Limit: 3}, 0, 0, "hash", true},
				{"a lease with a lock delay", core.AcquireRequest{Permits: 1, Limit: 1, LockDelay: time.Second}, 0, 0, "hash", true},
				{"a lease above a floor the clock passes before it ends", core.AcquireRequest{Permits: 1, Limit: 1}, 20 * time.Millisecond, 0, "string", true},
				{"a lease above a floor past its end", core.AcquireRequest{Permits: 1, Limit: 1}, 2500 * time.Millisecond, 2 * time.Second, "hash", true},
			} {
				key := "shape:" + name + ":" + tc.what
				req := tc.req
				req.Key, req.Holder, req.TTL = key, "h", cmp.Or(tc.ttl, time.Minute)
				var r core.AcquireResult
				var err error
				if tc.floor > 0 {
					r, err = s.(core.FenceRaiser).AcquireAbove(ctx, req, uint64(time.Now().Add(tc.floor).UnixMicro()))
				} else {
					r, err = s.Acquire(ctx, req)
				}
				if err != nil || !r.Granted {
					t.Fatalf("%s: %+v, %v", tc.what, r, err)
				}
				k := rediscore.Keys(key)[0]
				if typ := c.Type(ctx, k).Val(); typ != tc.typ {
					t.Fatalf("%s is a %s; want a %s", tc.what, typ, tc.typ)
				}
				if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: r.Fence}); !ok || err != nil {
					t.Fatalf("%s: Release = %v, %v", tc.what, ok, err)
				}
			}
			// Each key leaves nothing; the raised fence's hash once the clock has passed it.
			poll.Until(t, "the keys to leave nothing", func() bool { return len(keysMatching(t, c, "shape:"+name)) == 0 })
		})
	}
}

package rediscore_test

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// Tests of quick.lua: the quick paths of the uncontended acquire and release, and the values a
// call sends only when they are not their defaults.

// TestFloorsAreHonouredOnANewKey: a fence floor, sent only when it is not 0 and after every
// other value, is honoured by a grant on a key with no lease hash (where the quick acquire would
// otherwise grant the clock's fence), with or without a wait and a value before it; the next
// grant, plain, is above it.
func TestFloorsAreHonouredOnANewKey(t *testing.T) {
	t.Parallel()
	eachDriverAlone(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		s := mk()
		ctx := context.Background()
		floor := uint64(time.Now().Add(24*time.Hour).UnixMicro()) + 7
		for i, req := range []core.AcquireRequest{
			{Key: "floor-plain", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute},
			{Key: "floor-wait", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true},
			{Key: "floor-value", Holder: "a", Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute, Value: "v"},
		} {
			f := floor + uint64(i)*1000
			res, err := s.(core.FenceRaiser).AcquireAbove(ctx, req, f)
			if err != nil || !res.Granted || res.Fence != f {
				t.Fatalf("AcquireAbove(%s, %d) = %+v, %v; want granted at the floor", req.Key, f, res, err)
			}
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: "a", Fence: res.Fence}); !ok || err != nil {
				t.Fatalf("Release = %v, %v", ok, err)
			}
			req.Holder = "b"
			if res, err := s.Acquire(ctx, req); err != nil || !res.Granted || res.Fence != f+1 {
				t.Fatalf("the next Acquire on %s = %+v, %v; want fence %d", req.Key, res, err, f+1)
			}
		}
	})
}

// TestQuickReleaseReportsForeignCounters: a hash laid out as a lone lease's (the holder's entry,
// then fence, limit and keep) whose counters are not whole numbers of ours is someone else's: a
// release there fails with WRONGTYPE and leaves it as it was, as the general path does.
func TestQuickReleaseReportsForeignCounters(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t).Addr
			s, c := mk(t, srv), raw(t, srv)
			ctx := context.Background()
			now := time.Now()
			entry := "1 " + strconv.FormatInt(now.UnixMicro()-1000, 10) + " " + strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10)
			good := map[string]string{"fence": strconv.FormatInt(now.UnixMicro()-1000, 10), "limit": "1", rediscore.KeepField: strconv.FormatInt(now.Add(2*time.Hour).UnixMilli(), 10)}
			for _, counter := range []string{"fence", "limit", rediscore.KeepField} {
				for _, v := range []string{"", "x", "-1", "1.5", "9007199254740993"} {
					key := "quick-" + counter + "-" + v
					lease := rediscore.Keys(key)[0]
					want := map[string]string{":h": entry}
					args := []any{":h", entry}
					for _, f := range []string{"fence", "limit", rediscore.KeepField} {
						want[f] = good[f]
						if f == counter {
							want[f] = v
						}
						args = append(args, f, want[f])
					}
					if err := c.HSet(ctx, lease, args...).Err(); err != nil {
						t.Fatal(err)
					}
					ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"})
					if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), lease) {
						t.Errorf("Release over {%s: %q} = %v, %v; want a wrong-type error naming %s", counter, v, ok, err, lease)
					}
					if m, err := c.HGetAll(ctx, lease).Result(); err != nil || !reflect.DeepEqual(m, want) {
						t.Errorf("the hash with {%s: %q} became %q (%v)", counter, v, m, err)
					}
				}
			}
		})
	}
}

// TestRedlockNodePairKeepsItsCountersOnlyUntilTheClockPassesTheFence: a Redlock node's pairs,
// each grant's fence raised above the clock, take the lone tiers: every fence is above the one
// before, whether the floor sent is above the last fence or below it; a release keeps the
// fence alone, expiring just after the clock passes it, not the lease's TTL later; and once they expire the key holds nothing and the next grant is above them.
func TestRedlockNodePairKeepsItsCountersOnlyUntilTheClockPassesTheFence(t *testing.T) {
	testenv.SkipShort(t, "waits for the server clock to pass a raised fence on each driver")
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		s, c := mk(), raw(t, addr)
		ctx := context.Background()
		key := "node-pair"
		lease := rediscore.Keys(key)[0]
		fr := s.(core.FenceRaiser)
		ahead := uint64(time.Now().Add(2 * time.Second).UnixMicro())
		var last uint64
		for i, floor := range []uint64{ahead, ahead - 500_000, ahead + 10, 1, ahead + 20} {
			req := core.AcquireRequest{Key: key, Holder: "h" + strconv.Itoa(i), Permits: 1, Limit: 1, TTL: time.Hour}
			var res core.AcquireResult
			var err error
			if i%2 == 0 {
				res, err = fr.AcquireAbove(ctx, req, floor)
			} else {
				res, err = fr.RaiseFence(ctx, req, floor)
			}
			if err != nil || !res.Granted || res.Fence <= last || res.Fence < floor {
				t.Fatalf("grant %d with floor %d: %+v, %v; want granted above %d and at least the floor", i, floor, res, err, last)
			}
			last = res.Fence
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: req.Holder, Fence: res.Fence}); !ok || err != nil {
				t.Fatalf("release %d: %v, %v", i, ok, err)
			}
			// A lone lease leaves its fence alone, as a string.
			if v, err := c.Get(ctx, lease).Result(); err != nil || v != rediscore.LoneTag+strconv.FormatUint(last, 10) {
				t.Fatalf("after release %d the lease key holds %q (%v); want the fence alone, %d", i, v, err, last)
			}
			// Kept until just after the clock passes the fence, not the hour's lease.
			pttl, err := c.PTTL(ctx, lease).Result()
			until := time.Duration(int64(last)/1000+1-time.Now().UnixMilli()) * time.Millisecond
			if err != nil || pttl <= 0 || pttl > until+time.Second {
				t.Fatalf("after release %d the hash expires in %v (%v); want by the fence, in %v", i, pttl, err, until)
			}
		}
		poll.Until(t, "the counters to expire once the clock passes the fence", func() bool {
			n, err := c.Exists(ctx, lease).Result()
			return err == nil && n == 0
		})
		if got := uint64(time.Now().UnixMicro()); got <= last {
			t.Fatalf("the counters expired at %d µs, before the fence %d", got, last)
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "next", Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted || res.Fence <= last {
			t.Fatalf("the grant after the counters went: %+v, %v; want above %d", res, err, last)
		}
	})
}

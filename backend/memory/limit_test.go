package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// TestRandomOpsKeepOneLimitAndRisingFences drives one key with clients that disagree on its
// limit — acquires waiting or not, above fence floors, releases, waiters that give up, time
// passing leases and places by, the key dropped and made again — and checks after every step
// that the leases and waiters share one limit, the leases hold at most that many permits, and
// every new lease's fence is above every fence the key had before, in any of its lives.
func TestRandomOpsKeepOneLimitAndRisingFences(t *testing.T) {
	ctx := context.Background()
	holders := []string{"a", "b", "c", "d", "e"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		s := memory.New(memory.WithClock(clock))
		limitOf := map[string]int{} // the limit of the request that holds each holder's lease or place
		waiters := map[string]core.Wake{}
		type lease struct {
			holder string
			fence  uint64
		}
		seen := map[lease]bool{}
		var top uint64 // the highest fence the key ever had
		var log []string
		for step := range 60 {
			h := holders[rng.IntN(len(holders))]
			switch op := rng.IntN(10); {
			case op < 5:
				limit := 1 + rng.IntN(3)
				r := core.AcquireRequest{Key: "k", Holder: h, Permits: 1 + rng.IntN(limit), Limit: limit,
					TTL: time.Duration(10+rng.IntN(50)) * time.Second, Wait: time.Duration(rng.IntN(3)) * 20 * time.Second}
				var res core.AcquireResult
				var err error
				if op == 4 {
					res, err = s.AcquireAbove(ctx, r, top+uint64(rng.IntN(1<<20)))
				} else {
					res, err = s.Acquire(ctx, r)
				}
				log = append(log, fmt.Sprintf("acquire %s permits %d limit %d wait %v: %+v, %v", h, r.Permits, limit, r.Wait, res, err))
				switch {
				case errors.Is(err, core.ErrLimitMismatch), errors.Is(err, core.ErrInvalid):
				case err != nil:
					t.Fatalf("seed %d: %v", seed, err)
				case res.Granted || r.Wait > 0:
					limitOf[h] = limit
				}
				if r.Wait > 0 && !res.Granted && err == nil && waiters[h] == nil {
					w, err := s.Register(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					waiters[h] = w
				}
			case op < 7:
				ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: h})
				log = append(log, fmt.Sprintf("release %s: %v, %v", h, ok, err))
			case op < 8:
				if w := waiters[h]; w != nil {
					w.Close()
					delete(waiters, h)
					log = append(log, "leave "+h)
				}
			default:
				d := time.Duration(rng.IntN(40)) * time.Second
				if rng.IntN(5) == 0 {
					d = -time.Hour // a clock that steps back
				}
				clock.Advance(d)
				log = append(log, fmt.Sprintf("advance %v", d))
			}
			snap, err := s.Inspect(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d step %d: %s\nsnapshot %+v\nlimits %v\n%s", seed, step, fmt.Sprintf(format, args...), snap, limitOf, joinLines(log))
			}
			limit, used := 0, 0
			for _, l := range snap.Leases {
				if limit != 0 && limitOf[l.Holder] != limit {
					fail("leases of limits %d and %d", limit, limitOf[l.Holder])
				}
				limit = limitOf[l.Holder]
				used += l.Permits
				if id := (lease{l.Holder, l.Fence}); !seen[id] {
					if l.Fence <= top {
						fail("new lease of %s at fence %d, not above %d", l.Holder, l.Fence, top)
					}
					seen[id] = true
				}
			}
			for _, l := range snap.Leases {
				top = max(top, l.Fence)
			}
			if used > limit {
				fail("%d permits held under limit %d", used, limit)
			}
			for _, w := range snap.Waiters {
				if limit != 0 && limitOf[w.Holder] != limit {
					fail("waiter %s of limit %d on a key of limit %d", w.Holder, limitOf[w.Holder], limit)
				}
				limit = limitOf[w.Holder]
			}
			if limit != 0 && snap.Limit != limit {
				fail("Inspect reports limit %d, the key's is %d", snap.Limit, limit)
			}
		}
		// Everyone gone and every lease and place past: the key leaves nothing behind.
		for h, w := range waiters {
			w.Close()
			s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: h})
		}
		for _, h := range holders {
			s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: h})
		}
		clock.Advance(time.Hour)
		if _, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
			t.Fatalf("seed %d: Extend after everything ended: %v, want ErrLost", seed, err)
		}
		if n := s.Keys(); n != 0 {
			t.Fatalf("seed %d: %d keys left after everyone released and left, want 0\n%s", seed, n, joinLines(log))
		}
	}
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}

package rediscore_test

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
)

// TestFastPathsMatchAtTheEdgesOfTheirTextComparisons: the fast paths compare numbers as texts
// (an expiry with the clock in ms, a fence with the clock in µs) and take counters only as int()
// writes them; at the edges of those comparisons they must do what the general path does, byte
// for byte: a server clock whose µs or ms have leading zeros, an expiry a ms either side of now,
// an expiry or counter with a leading zero (a digit longer than the clock), counters of 0, a
// fence at, a µs below and above the clock in µs, 16-digit counters either side of 2^53.
func TestFastPathsMatchAtTheEdgesOfTheirTextComparisons(t *testing.T) {
	t.Parallel()
	s := func(x int64) string { return strconv.FormatInt(x, 10) }
	nows := []time.Time{
		time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),       // µs "0"
		time.Date(2026, 3, 1, 12, 0, 0, 123000, time.UTC),  // µs "123": ms "000"
		time.Date(2026, 3, 1, 12, 0, 0, 9999000, time.UTC), // ms "009"
	}
	srcs := map[int][2]string{
		srcAcquire: {hashSource(t, srcAcquire), generalSource(t, srcAcquire)},
		srcExtend:  {hashSource(t, srcExtend), generalSource(t, srcExtend)},
		srcRelease: {hashSource(t, srcRelease), generalSource(t, srcRelease)},
	}
	fast, general := newTwin(t, true), newTwin(t, true)
	for _, now := range nows {
		nowMs, nowUs := now.UnixMilli(), now.UnixMicro()
		far := s(nowMs + 10*24*3600*1000)
		lease := func(fence, exp int64) string { return "1 " + s(fence) + " " + s(exp) }
		lone := func(entry string, counters map[string]string) fastState {
			h := map[string]string{":h": entry, "fence": "7", "limit": "1", rediscore.KeepField: far}
			for f, v := range counters {
				if v == "" {
					delete(h, f)
				} else {
					h[f] = v
				}
			}
			return fastState{hash: h}
		}
		live := nowMs + 60000
		states := map[string]fastState{
			"expiry at now":                  lone(lease(7, nowMs), nil),
			"expiry a ms on":                 lone(lease(7, nowMs+1), nil),
			"expiry a ms back":               lone(lease(7, nowMs-1), nil),
			"expiry with a leading zero":     lone("1 7 0"+s(live), nil),
			"expiry 0 and a ms back":         lone("1 7 0"+s(nowMs-1), nil),
			"other's expiry, leading zero":   lone(lease(7, live), map[string]string{":o": "1 6 0" + s(live), "limit": "2"}),
			"other's expiry at now":          lone(lease(7, live), map[string]string{":o": lease(6, nowMs), "limit": "2"}),
			"fence at now":                   lone(lease(nowUs, live), map[string]string{"fence": s(nowUs)}),
			"fence a µs back":                lone(lease(nowUs-1, live), map[string]string{"fence": s(nowUs - 1)}),
			"fence a µs on":                  lone(lease(nowUs+1, live), map[string]string{"fence": s(nowUs + 1)}),
			"fence with a leading zero":      lone(lease(7, live), map[string]string{"fence": "0" + s(nowUs+1)}),
			"fence 2^53-1":                   lone(lease(7, live), map[string]string{"fence": "9007199254740991"}),
			"fence 9e15, 16 digits":          lone(lease(7, live), map[string]string{"fence": "8999999999999999"}),
			"fence 0":                        lone(lease(7, live), map[string]string{"fence": "0"}),
			"limit 0":                        lone(lease(7, live), map[string]string{"limit": "0"}),
			"keep with a leading zero":       lone(lease(7, live), map[string]string{rediscore.KeepField: "0" + far}),
			"line, watch, left and seq 0":    lone(lease(7, live), map[string]string{"line": "0", "watch": "0", "left": "0", "seq": "0"}),
			"line at now":                    lone(lease(7, live), map[string]string{"line": s(nowMs)}),
			"line a ms on":                   lone(lease(7, live), map[string]string{"line": s(nowMs + 1)}),
			"watch with a leading zero":      lone(lease(7, live), map[string]string{"watch": "0" + s(nowMs+1)}),
			"left a ms on":                   lone(lease(7, live), map[string]string{"left": s(nowMs + 1)}),
			"left with a leading zero":       lone(lease(7, live), map[string]string{"left": "0" + s(nowMs+1)}),
			"counters, line 0":               {hash: map[string]string{"fence": "7", "limit": "1", "line": "0", rediscore.KeepField: far}},
			"counters, fence at now":         {hash: map[string]string{"fence": s(nowUs), "limit": "1", rediscore.KeepField: far}},
			"counters, keep at the edge":     {hash: map[string]string{"fence": "7", "limit": "1", rediscore.KeepField: s(nowMs + 60000)}},
			"counters, keep a ms beyond":     {hash: map[string]string{"fence": "7", "limit": "1", rediscore.KeepField: s(nowMs + 60001)}},
			"counters, keep 0 only":          {hash: map[string]string{rediscore.KeepField: "0"}},
			"counters, fence only":           {hash: map[string]string{"fence": "7"}},
			"self with a delay of 0":         lone(lease(7, live)+"+0", nil),
			"self with a delay, expiry at 0": lone("1 7 0+5", nil),
		}
		calls := map[string]struct {
			src  int
			args []any
		}{
			"acquire":                {srcAcquire, []any{"h", int64(60000)}},
			"acquire other":          {srcAcquire, []any{"o", int64(60000)}},
			"acquire above, delay":   {srcAcquire, []any{"o", int64(60000), int64(0), "", "0", 1, 1, "", nowUs + 5, int64(0), int64(5)}},
			"release":                {srcRelease, []any{"h"}},
			"release at its fence":   {srcRelease, []any{"h", 7}},
			"release at the clock's": {srcRelease, []any{"h", nowUs}},
			"extend":                 {srcExtend, []any{"h", int64(60000)}},
			"extend other":           {srcExtend, []any{"o", int64(60000)}},
		}
		for _, sn := range slices.Sorted(maps.Keys(states)) {
			for _, cn := range slices.Sorted(maps.Keys(calls)) {
				st, c := states[sn], calls[cn]
				got := fast.run(t, now, "k", st, srcs[c.src][0], slices.Clone(c.args))
				want := general.run(t, now, "k", st, srcs[c.src][1], slices.Clone(c.args))
				if !sameSnapshots(got, want) {
					t.Errorf("at %s, %s on %s: with the fast path\n%s\nwithout\n%s", now.Format(time.StampMicro), cn, sn, got, want)
				}
			}
		}
	}
}

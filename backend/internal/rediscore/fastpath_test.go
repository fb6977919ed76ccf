package rediscore_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// The uncontended fast paths of acquire, extend and release against their general paths: for
// every prepared state of a key, the same call made by the script as it is and by the script with
// its fast path switched off must leave the same keys, expiries, messages and reply.

// TestFastPathsDoWhatTheGeneralPathsDo: on two miniredis servers at the same clock,
// the same acquire, extend or release, by the script and by the script without its fast path, for
// states of counters alone (at their edges, foreign ones, at now and a ms after), leases of
// the holder and of others (expired, untaken, with values, foreign), a live line, watch and
// left, and calls with values, fences asked above (AcquireAbove, a floor), semaphores, tries,
// waits and TTLs up to 2^50 ms: the keys, their expiries, the messages and the reply are the
// same, byte for byte.
func TestFastPathsDoWhatTheGeneralPathsDo(t *testing.T) {
	testenv.SkipShort(t, "a table of thousands of script calls (TestFastPathsMatchOnDrawnStates draws some)")
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	nowMs, nowUs := now.UnixMilli(), now.UnixMicro()
	s := func(x int64) string { return strconv.FormatInt(x, 10) }
	const halfWeek, ttl = 302400000, 60000
	far := s(nowMs + 2*2*halfWeek)
	lease := func(n, fence, exp int64, rest string) string { return s(n) + " " + s(fence) + " " + s(exp) + rest }
	live, dead := nowMs+ttl, nowMs
	counters := func(extra map[string]string) fastState {
		h := map[string]string{"fence": "7", "limit": "1", "seq": "3", rediscore.KeepField: far}
		for f, v := range extra {
			if v == "" {
				delete(h, f)
			} else {
				h[f] = v
			}
		}
		return fastState{hash: h}
	}
	liveLine := func(st fastState) fastState {
		st.hash["line"] = s(nowMs + 1)
		st.queue = map[string]float64{"w": 3}
		st.waiting = map[string]string{"w": "1 " + s(nowMs+1) + " 1 60000 0 0 wchan"}
		return st
	}
	// lone is the hash of one lease, at entry f, as a grant on a new hash writes it (the entry,
	// fence, limit, keep, in that order: the quick paths' state), with the counters in extra.
	lone := func(f, entry string, extra map[string]string) fastState {
		h := map[string]string{f: entry, "fence": "7", "limit": "1", rediscore.KeepField: far}
		maps.Copy(h, extra)
		return fastState{hash: h, order: []string{f, "fence", "limit", rediscore.KeepField}}
	}
	states := map[string]fastState{
		"lone":                    lone(":h", lease(1, 7, live, ""), nil),
		"lone other":              lone(":o", lease(1, 7, live, ""), nil),
		"lone untaken with value": lone(":h", lease(1, 7, live, " q\nv"), nil),
		"lone, 2 of 3":            lone(":h", lease(2, 7, live, ""), map[string]string{"limit": "3"}),
		"lone expired":            lone(":h", lease(1, 7, dead, ""), nil),
		"lone with a delay":       lone(":h", lease(1, 7, live, " q+60000\nv"), nil),
		"lone in its delay":       lone(":h", lease(1, 7, dead, "+60000"), nil),
		"lone, delay ended":       lone(":h", lease(1, 7, dead, "+1"), nil),
		"lone, fence above now":   lone(":h", lease(1, nowUs+5000, live, ""), map[string]string{"fence": s(nowUs + 5000)}),
		"lone, keep a ms short":   lone(":h", lease(1, 7, live, ""), map[string]string{rediscore.KeepField: s(nowMs + ttl - 1)}),
		"lone, keep at the edge":  lone(":h", lease(1, 7, live, ""), map[string]string{rediscore.KeepField: s(nowMs + ttl)}),
		"lone, keep not ours":     lone(":h", lease(1, 7, live, ""), map[string]string{rediscore.KeepField: "x"}),
		"lone, empty limit":       lone(":h", lease(1, 7, live, ""), map[string]string{"limit": ""}),
		"lone, fence 2^53":        lone(":h", lease(1, 7, live, ""), map[string]string{"fence": "9007199254740992"}),
		"lone, entry fence 2^53":  lone(":h", lease(1, 1<<53, live, ""), map[string]string{"fence": "9007199254740992"}),
		"lone, entry fence 0":     lone(":h", lease(1, 0, live, ""), nil),
		"lone, entry not ours":    lone(":h", "garbage", nil),
		// As a hash kept for a watch or a left try that lapsed leaves the counters (a release
		// under a fence above the clock leaves the fence alone, a string, now), and a grant then
		// adds its lease after them.
		"counters kept":                       {hash: map[string]string{"fence": "7", "limit": "1", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField}},
		"counters kept, fence above now":      {hash: map[string]string{"fence": s(nowUs + 5000), "limit": "1", rediscore.KeepField: s(nowMs + 6)}, order: []string{"fence", "limit", rediscore.KeepField}},
		"counters kept, fence far above now":  {hash: map[string]string{"fence": s(nowUs + 2e9), "limit": "1", rediscore.KeepField: s(nowMs + 2e6 + 1)}, order: []string{"fence", "limit", rediscore.KeepField}},
		"counters kept, fence at now":         {hash: map[string]string{"fence": s(nowUs), "limit": "1", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField}},
		"counters kept, limit 3":              {hash: map[string]string{"fence": s(nowUs + 5000), "limit": "3", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField}},
		"counters kept, out of order":         {hash: map[string]string{"fence": "7", "limit": "1", rediscore.KeepField: far}, order: []string{rediscore.KeepField, "fence", "limit"}},
		"counters kept, fence 2^53-1":         {hash: map[string]string{"fence": "9007199254740991", "limit": "1", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField}},
		"counters kept, fence 2^53":           {hash: map[string]string{"fence": "9007199254740992", "limit": "1", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField}},
		"counters kept, fence 07":             {hash: map[string]string{"fence": "07", "limit": "1", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField}},
		"lone last, fence above now":          {hash: map[string]string{":h": lease(1, nowUs+5000, live, ""), "fence": s(nowUs + 5000), "limit": "1", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField, ":h"}},
		"lone last, fence above, kept to it":  {hash: map[string]string{":h": lease(1, nowUs+5000, live, ""), "fence": s(nowUs + 5000), "limit": "1", rediscore.KeepField: s(nowMs + 6)}, order: []string{"fence", "limit", rediscore.KeepField, ":h"}},
		"lone last, fence above its own":      {hash: map[string]string{":h": lease(1, nowUs+5000, live, ""), "fence": s(nowUs + 6000), "limit": "2", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField, ":h"}},
		"lone last, fence below now":          {hash: map[string]string{":h": lease(1, 7, live, ""), "fence": "7", "limit": "1", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField, ":h"}},
		"lone last, expired, fence above now": {hash: map[string]string{":h": lease(1, nowUs+5000, dead, ""), "fence": s(nowUs + 5000), "limit": "1", rediscore.KeepField: far}, order: []string{"fence", "limit", rediscore.KeepField, ":h"}},
		"lone, counters not in order":         {hash: map[string]string{":h": lease(1, 7, live, ""), "fence": "7", "limit": "1", rediscore.KeepField: far}, order: []string{":h", "fence", rediscore.KeepField, "limit"}},
		"none":                                {},
		"counters":                            counters(nil),
		"counters, no fence":                  counters(map[string]string{"fence": ""}),
		"counters, keep only":                 {hash: map[string]string{rediscore.KeepField: far}},
		"fence above now":                     counters(map[string]string{"fence": s(nowUs + 5000)}),
		"fence 2^53-2":                        counters(map[string]string{"fence": "9007199254740990"}),
		"keep at the edge":                    counters(map[string]string{rediscore.KeepField: s(nowMs + ttl)}),
		"keep a ms short":                     counters(map[string]string{rediscore.KeepField: s(nowMs + ttl - 1)}),
		"keep 0":                              counters(map[string]string{rediscore.KeepField: "0"}),
		"no keep":                             counters(map[string]string{rediscore.KeepField: ""}),
		"keep for 2^50":                       counters(map[string]string{rediscore.KeepField: s(nowMs + 1<<50 + 2*halfWeek)}),
		"line at now":                         counters(map[string]string{"line": s(nowMs)}),
		"line live":                           liveLine(counters(nil)),
		"line live, no place":                 counters(map[string]string{"line": s(nowMs + 1)}),
		"watch at now":                        counters(map[string]string{"watch": s(nowMs)}),
		"watch live":                          counters(map[string]string{"watch": s(nowMs + 1)}),
		"left at now":                         counters(map[string]string{"left": s(nowMs)}),
		"left live": func() fastState {
			st := counters(map[string]string{"left": s(nowMs + 1)})
			st.left = map[string]float64{"t1": float64(nowMs + 1)}
			return st
		}(),
		"expired other":            counters(map[string]string{":o": lease(1, 7, dead, "")}),
		"expired self":             counters(map[string]string{":h": lease(1, 7, dead, "")}),
		"live other":               counters(map[string]string{":o": lease(1, 7, live, ""), "limit": "2"}),
		"self":                     counters(map[string]string{":h": lease(1, 7, live, "")}),
		"self untaken":             counters(map[string]string{":h": lease(1, 7, live, " q")}),
		"self with value":          counters(map[string]string{":h": lease(1, 7, live, "\nv q\n\x00")}),
		"self untaken with value":  counters(map[string]string{":h": lease(1, 7, live, " q\n q")}),
		"self, 2 permits":          counters(map[string]string{":h": lease(2, 7, live, ""), "limit": "3"}),
		"self, odd tail":           counters(map[string]string{":h": lease(1, 7, live, "x")}),
		"self and live other":      counters(map[string]string{":h": lease(1, 7, live, ""), ":o": lease(1, 6, live, ""), "limit": "2"}),
		"self and expired other":   counters(map[string]string{":h": lease(1, 7, live, ""), ":o": lease(1, 6, dead, ""), "limit": "2"}),
		"self and foreign lease":   counters(map[string]string{":h": lease(1, 7, live, ""), ":x": "garbage"}),
		"self and numeric lease":   counters(map[string]string{":h": lease(1, 7, live, ""), ":x": "5"}),
		"self, fence 0":            counters(map[string]string{":h": lease(1, 0, live, "")}),
		"self, fence 07":           counters(map[string]string{":h": "1 07 " + s(live)}),
		"self, permits 01":         counters(map[string]string{":h": "01 7 " + s(live)}),
		"self, permits 0":          counters(map[string]string{":h": "0 7 " + s(live)}),
		"self, fence 2^53-1":       counters(map[string]string{":h": lease(1, 1<<53-1, live, "")}),
		"self, fence 2^53":         counters(map[string]string{":h": lease(1, 1<<53, live, "")}),
		"self, fence of 20 digits": counters(map[string]string{":h": "1 12345678901234567890 " + s(live)}),
		"self, space tail":         counters(map[string]string{":h": lease(1, 7, live, " \nv")}),
		"self, q tail":             counters(map[string]string{":h": lease(1, 7, live, "q")}),
		"self with a delay":        counters(map[string]string{":h": lease(1, 7, live, "+60000\nv")}),
		"self, delay 0":            counters(map[string]string{":h": lease(1, 7, live, "+0")}),
		"self, delay 007":          counters(map[string]string{":h": lease(1, 7, live, " q+007")}),
		"self, delay of 20 digits": counters(map[string]string{":h": lease(1, 7, live, "+12345678901234567890")}),
		"other in its delay":       counters(map[string]string{":h": lease(1, 7, live, ""), ":o": lease(1, 6, dead, "+60000"), "limit": "2"}),
		"self in its delay":        counters(map[string]string{":h": lease(1, 7, dead, "+60000")}),
		"self, expiry 0":           counters(map[string]string{":h": lease(1, 7, 0, "")}),
		"self, expiry a ms on":     counters(map[string]string{":h": lease(1, 7, nowMs+1, "")}),
		"self, keep a ms short":    counters(map[string]string{":h": lease(1, 7, live, ""), rediscore.KeepField: s(nowMs + ttl - 1)}),
		"self, keep at the edge":   counters(map[string]string{":h": lease(1, 7, live, ""), rediscore.KeepField: s(nowMs + ttl)}),
		"self, no keep":            counters(map[string]string{":h": lease(1, 7, live, ""), rediscore.KeepField: ""}),
		"self, no limit":           counters(map[string]string{":h": lease(1, 7, live, ""), "limit": ""}),
		"self alone":               {hash: map[string]string{":h": lease(1, 7, live, "")}},
		"self, line live":          liveLine(counters(map[string]string{":h": lease(1, 7, live, "")})),
		"self, line at now":        counters(map[string]string{":h": lease(1, 7, live, ""), "line": s(nowMs)}),
		"self, watch live":         counters(map[string]string{":h": lease(1, 7, live, ""), "watch": s(nowMs + 1)}),
		"self, watch at now":       counters(map[string]string{":h": lease(1, 7, live, ""), "watch": s(nowMs)}),
		"self, left live":          counters(map[string]string{":h": lease(1, 7, live, ""), "left": s(nowMs + 1)}),
		"self, fence above now":    counters(map[string]string{":h": lease(1, nowUs+5000, live, ""), "fence": s(nowUs + 5000)}),
		"self, fence at now":       counters(map[string]string{":h": lease(1, nowUs, live, ""), "fence": s(nowUs)}),
		"self, fence a µs back":    counters(map[string]string{":h": lease(1, nowUs-1, live, ""), "fence": s(nowUs - 1)}),
		"self, fence above, left":  counters(map[string]string{":h": lease(1, 7, live, ""), "fence": s(nowUs + 5000), "left": s(nowMs + 1)}),
		"self, foreign counter":    counters(map[string]string{":h": lease(1, 7, live, ""), "FENCE": "1"}),
		"self, bad fence":          counters(map[string]string{":h": lease(1, 7, live, ""), "fence": "1.5"}),
		"self, bad keep":           counters(map[string]string{":h": lease(1, 7, live, ""), rediscore.KeepField: "-1"}),
		"foreign self entry":       counters(map[string]string{":h": "garbage"}),
		"foreign numeric entry":    counters(map[string]string{":h": "5"}),
		"fence x":                  counters(map[string]string{"fence": "x"}),
		"fence 1.5":                counters(map[string]string{"fence": "1.5"}),
		"fence -1":                 counters(map[string]string{"fence": "-1"}),
		"fence 0x10":               counters(map[string]string{"fence": "0x10"}),
		"fence spaced":             counters(map[string]string{"fence": " 7 "}),
		"fence 1e3":                counters(map[string]string{"fence": "1e3"}),
		"fence inf":                counters(map[string]string{"fence": "inf"}),
		"fence nan":                counters(map[string]string{"fence": "nan"}),
		"fence 2^53":               counters(map[string]string{"fence": "9007199254740992"}),
		"watch x":                  counters(map[string]string{"watch": "x"}),
		"left -1":                  counters(map[string]string{"left": "-1"}),
		"foreign name":             counters(map[string]string{"other": "1"}),
		"empty name":               counters(map[string]string{"": "1"}),
		"counter named like lease": counters(map[string]string{":": "1"}),
	}
	acq := func(holder string, n, limit int, ttl int64, minFence int64, wait int64, floor int64, try, value string) []any {
		return trimmedAcquireArgv(fullAcquireArgv(holder, n, limit, ttl, wait, try, "0", value, minFence, floor))
	}
	calls := map[string]struct {
		src  int
		args []any
	}{
		"acquire":                   {srcAcquire, acq("h", 1, 1, ttl, 0, 0, 0, "", "")},
		"acquire other":             {srcAcquire, acq("o", 1, 1, ttl, 0, 0, 0, "", "")},
		"acquire, value":            {srcAcquire, acq("h", 1, 1, ttl, 0, 0, 0, "", "v\n q\x00é")},
		"acquire above":             {srcAcquire, acq("h", 1, 1, ttl, nowUs+1e9, 0, 0, "", "")},
		"acquire above 7":           {srcAcquire, acq("h", 1, 1, ttl, 7, 0, 0, "", "")},
		"acquire over a floor":      {srcAcquire, acq("h", 1, 1, ttl, 0, 0, nowUs+2e9, "", "")},
		"acquire above, floor":      {srcAcquire, acq("h", 1, 1, ttl, nowUs+3e9, 0, nowUs+2e9, "", "")},
		"acquire 1 of 2":            {srcAcquire, acq("h", 1, 2, ttl, 0, 0, 0, "", "")},
		"acquire 2 of 3":            {srcAcquire, acq("h", 2, 3, ttl, 0, 0, 0, "", "")},
		"acquire 2 of 1":            {srcAcquire, acq("h", 2, 1, ttl, 0, 0, 0, "", "")},
		"acquire 1 of 2, wait":      {srcAcquire, acq("o", 1, 2, ttl, 0, 60000, 0, "t3", "v")},
		"acquire 1 of 3 above":      {srcAcquire, acq("h", 1, 3, ttl, nowUs+1e9, 0, 0, "", "")},
		"acquire, try":              {srcAcquire, acq("h", 1, 1, ttl, 0, 0, 0, "t1", "")},
		"acquire, wait":             {srcAcquire, acq("h", 1, 1, ttl, 0, 60000, 0, "t2", "")},
		"acquire for 2^50 ms":       {srcAcquire, acq("h", 1, 1, 1<<50, 0, 0, 0, "", "")},
		"acquire for 1 ms":          {srcAcquire, acq("h", 1, 1, 1, 0, 0, 0, "", "")},
		"acquire, delay":            {srcAcquire, append(fullAcquireArgv("h", 1, 1, ttl, 0, "", "0", "", 0, 0), int64(60000))},
		"acquire 1 of 2, delay":     {srcAcquire, append(fullAcquireArgv("h", 1, 2, ttl, 0, "", "0", "v", 0, 0), int64(1))},
		"acquire above, delay":      {srcAcquire, append(fullAcquireArgv("h", 1, 1, ttl, 0, "", "0", "", nowUs+1e9, 0), int64(1<<50))},
		"acquire, wait, delay":      {srcAcquire, append(fullAcquireArgv("o", 1, 2, ttl, 60000, "t3", "0", "v", 0, 0), int64(60000))},
		"release":                   {srcRelease, []any{"h", 0}},
		"release at its fence":      {srcRelease, []any{"h", 7}},
		"release at another fence":  {srcRelease, []any{"h", 8}},
		"release of another holder": {srcRelease, []any{"o", 0}},
		"release, unknown holder":   {srcRelease, []any{"z", 0}},
		"extend":                    {srcExtend, []any{"h", ttl}},
		"extend for 1 ms":           {srcExtend, []any{"h", 1}},
		"extend for 2^50 ms":        {srcExtend, []any{"h", int64(1) << 50}},
		"extend another holder":     {srcExtend, []any{"o", ttl}},
		"extend, unknown holder":    {srcExtend, []any{"z", ttl}},
	}
	srcs := map[int][2]string{
		srcAcquire: {hashSource(t, srcAcquire), generalSource(t, srcAcquire)},
		srcExtend:  {hashSource(t, srcExtend), generalSource(t, srcExtend)},
		srcRelease: {hashSource(t, srcRelease), generalSource(t, srcRelease)},
	}
	for server, real := range twinServers() {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			fast, general := newTwin(t, real), newTwin(t, real)
			for _, sn := range slices.Sorted(maps.Keys(states)) {
				for _, cn := range slices.Sorted(maps.Keys(calls)) {
					st, c := states[sn], calls[cn]
					got := fast.run(t, now, "k", st, srcs[c.src][0], slices.Clone(c.args))
					want := general.run(t, now, "k", st, srcs[c.src][1], slices.Clone(c.args))
					if !sameSnapshots(got, want) {
						t.Errorf("%s on %s: with the fast path\n%s\nwithout\n%s", cn, sn, got, want)
					}
				}
			}
		})
	}
}

// TestReleaseReportsAForeignEntry: a lease hash that holds an entry starting with ':'
// that is not a lease of ours is someone else's: a release there fails with WRONGTYPE and
// leaves the hash as it was, as every other call does, even when the holder's own lease in it
// is there to release.
func TestReleaseReportsAForeignEntry(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			got := mustAcquire(t, s, core.AcquireRequest{Key: "shared", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}, true)
			// Another's try, refused, makes the lone lease the lease hash.
			mustAcquire(t, s, core.AcquireRequest{Key: "shared", Holder: "x", Permits: 1, Limit: 1, TTL: time.Minute}, false)
			if err := c.HSet(ctx, rediscore.Keys("shared")[0], ":theirs", "not a lease").Err(); err != nil {
				t.Fatal(err)
			}
			ok, err := s.Release(ctx, core.ReleaseRequest{Key: "shared", Holder: "h", Fence: got.Fence})
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("Release on a hash with someone else's entry = %v, %v; want a WRONGTYPE error", ok, err)
			}
			if h := holdersOf(t, c, "shared"); h["h"] == "" || h["theirs"] != "not a lease" {
				t.Errorf("after the refused release the hash holds %q; want it untouched", h)
			}
		})
	}
}

// TestReleaseDeletesExpiredLeases: a release writes, and the call that writes deletes
// the expired leases it finds (common.lua's header): a semaphore's holder that releases while
// another's lease has expired leaves the hash with no lease at all.
func TestReleaseDeletesExpiredLeases(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			mustAcquire(t, s, core.AcquireRequest{Key: "sem", Holder: "gone", Permits: 1, Limit: 2, TTL: 20 * time.Millisecond}, true)
			here := mustAcquire(t, s, core.AcquireRequest{Key: "sem", Holder: "here", Permits: 1, Limit: 2, TTL: time.Minute}, true)
			expired(t, s, "sem", "gone")
			ok, err := s.Release(context.Background(), core.ReleaseRequest{Key: "sem", Holder: "here", Fence: here.Fence})
			if !ok || err != nil {
				t.Fatalf("Release = %v, %v", ok, err)
			}
			if h := holdersOf(t, c, "sem"); len(h) != 0 {
				t.Errorf("after the release the hash holds %q; want the expired lease deleted too", h)
			}
		})
	}
}

// TestFastPathsMatchOnDrawnStates: as TestFastPathsDoWhatTheGeneralPathsDo,
// on states rapid draws: counters a ms either side of now (or absent, or the hash's expiry at
// the edge of the call's need), leases of the caller and of others expired at, before or after
// now, untaken or with values, a live line, and acquires, extends and releases of any of those holders.
func TestFastPathsMatchOnDrawnStates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 999999000, time.UTC)
	nowMs := now.UnixMilli()
	s := func(x int64) string { return strconv.FormatInt(x, 10) }
	srcs := map[int][2]string{
		srcAcquire: {hashSource(t, srcAcquire), generalSource(t, srcAcquire)},
		srcExtend:  {hashSource(t, srcExtend), generalSource(t, srcExtend)},
		srcRelease: {hashSource(t, srcRelease), generalSource(t, srcRelease)},
	}
	fast, general := newTwin(t, true), newTwin(t, true)
	rapid.Check(t, func(rt *rapid.T) {
		ttl := rapid.SampledFrom([]int64{1, 60000, 1 << 50}).Draw(rt, "ttl")
		near := func(label string, base int64) string {
			return s(base + rapid.Int64Range(-1, 1).Draw(rt, label))
		}
		st := fastState{hash: map[string]string{}}
		for _, c := range []string{"fence", "limit", "seq", "watch", "line", "left", rediscore.KeepField} {
			switch rapid.IntRange(0, 2).Draw(rt, c+" kind") {
			case 0: // absent
			case 1:
				switch c {
				case rediscore.KeepField:
					st.hash[c] = near(c, nowMs+ttl)
				case "fence":
					st.hash[c] = near(c, now.UnixMicro())
				case "limit", "seq":
					st.hash[c] = s(rapid.Int64Range(0, 3).Draw(rt, c))
				default:
					st.hash[c] = near(c, nowMs)
				}
			case 2:
				st.hash[c] = s(rapid.Int64Range(0, 1<<53-1).Draw(rt, c))
			}
		}
		if line, _ := strconv.ParseInt(st.hash["line"], 10, 64); line > nowMs && rapid.Bool().Draw(rt, "place") {
			st.queue = map[string]float64{"w": 1}
			st.waiting = map[string]string{"w": "1 " + s(line) + " 2 60000 0 0 wchan"}
		}
		if left, _ := strconv.ParseInt(st.hash["left"], 10, 64); left > nowMs {
			st.left = map[string]float64{"t": float64(left)}
		}
		for _, h := range []string{"h", "o", "p"} {
			if rapid.Bool().Draw(rt, h+" holds") {
				v := rapid.IntRange(1, 2).Draw(rt, h+" permits")
				e := s(int64(v)) + " " + s(rapid.Int64Range(5, 9).Draw(rt, h+" fence")) + " " + near(h+" exp", nowMs)
				e += rapid.SampledFrom([]string{"", " q", "\nv", " q\n q\n", "+1", "+60000", " q+60000\nv"}).Draw(rt, h+" tail")
				st.hash[":"+h] = e
			}
		}
		if len(st.hash) == 0 && rapid.Bool().Draw(rt, "no hash") {
			st.hash = nil
		}
		holder := rapid.SampledFrom([]string{"h", "o", "z"}).Draw(rt, "holder")
		var src int
		var args []any
		switch rapid.IntRange(0, 2).Draw(rt, "call") {
		case 0:
			src, args = srcRelease, []any{holder, rapid.Int64Range(0, 8).Draw(rt, "want")}
		case 1:
			src, args = srcExtend, []any{holder, ttl}
		default:
			n := rapid.IntRange(1, 2).Draw(rt, "n")
			minFence := rapid.SampledFrom([]int64{0, 7, now.UnixMicro() + 1}).Draw(rt, "min fence")
			wait := rapid.SampledFrom([]int64{0, 60000}).Draw(rt, "wait")
			floor := rapid.SampledFrom([]int64{0, now.UnixMicro() + 2}).Draw(rt, "floor")
			try := rapid.SampledFrom([]string{"", "t"}).Draw(rt, "try")
			value := rapid.SampledFrom([]string{"", "v\n q"}).Draw(rt, "value")
			args = fullAcquireArgv(holder, n, rapid.IntRange(1, 3).Draw(rt, "limit"), ttl, wait, try, "0", value, minFence, floor)
			args = append(args, rapid.SampledFrom([]int64{0, 1, 60000}).Draw(rt, "lock delay"))
			if rapid.Bool().Draw(rt, "trimmed") {
				args = trimmedAcquireArgv(args)
			}
			src = srcAcquire
		}
		got := fast.run(t, now, "k", st, srcs[src][0], slices.Clone(args))
		want := general.run(t, now, "k", st, srcs[src][1], slices.Clone(args))
		if !sameSnapshots(got, want) {
			rt.Fatalf("%q on %#v: with the fast path\n%s\nwithout\n%s", args, st, got, want)
		}
	})
}

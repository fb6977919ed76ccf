package rediscore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/internal/testenv"
)

// The fast paths of acquire and release against the general paths, not on one prepared state at
// a time (as TestFastPathsMatchOnDrawnStates does) but along whole histories of several holders
// that every script makes together: tries that wait in line and tries that do not, leaves with
// and without a try id (the left set), watches, extends, releases at the right fence and at
// others, semaphores whose limit changes from call to call, values with '\n', " q" and digits,
// and a clock that moves past TTLs, waits, watches and the line's and left's hints (while
// Redis, on its own clock, keeps the keys: the state where a counter says a key has expired
// and it is still there).

// TestFastPathsMatchAlongHistories: two redis-servers run the same history, one with
// the scripts as they are and one with the fast paths of acquire and release switched off; after
// every call the reply, the keys (contents, and expiries to within a second), and the messages
// published are the same. (No key is given an expiry of under 20 s: Redis expires keys by its
// own clock, which the test does not move.)
func TestFastPathsMatchAlongHistories(t *testing.T) {
	testenv.SkipShort(t, "differential: runs of random histories")
	t.Parallel()
	fast, general := newTwin(t, true), newTwin(t, true)
	srcs := map[int][2]string{
		srcAcquire: {hashSource(t, srcAcquire), generalSource(t, srcAcquire)},
		srcRelease: {hashSource(t, srcRelease), generalSource(t, srcRelease)},
	}
	const key = "k"
	ks := rediscore.Keys(key)
	keys := ks
	ctx := context.Background()
	// Each history draws uniformly from a seed of its own, so that rare interleavings come up
	// too; a failure names the seed, which replays the history as base.
	histories := testenv.Pick(30, 150)
	base := rand.Uint64()
	t.Logf("%d histories from seed %d on", histories, base)
	for h := range uint64(histories) {
		seed := base + h
		rnd := rand.New(rand.NewPCG(seed, seed>>1|1))
		intIn := func(lo, hi int) int { return lo + rnd.IntN(hi-lo+1) }
		i64In := func(lo, hi int64) int64 { return lo + rnd.Int64N(hi-lo+1) }
		for _, tw := range []*twin{fast, general} {
			if err := tw.c.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i64In(0, 999999)) * time.Microsecond)
		holders := []string{"a", "b", "c", "12 3"}
		fences := map[string]int64{} // the last fence each holder was granted, as far as a reply said
		tries := 0
		steps := intIn(10, 80)
		for i := range steps {
			var src int
			var args []any
			h := oneOf(rnd, holders)
			switch op := intIn(0, 9); op {
			case 0, 1, 2, 3: // acquire
				limit := intIn(1, 3)
				n := intIn(1, limit)
				try := ""
				if rnd.IntN(2) == 0 {
					tries++
					try = "t" + strconv.Itoa(intIn(1, tries))
				}
				var above, floor int64
				switch intIn(0, 5) {
				case 0:
					above = now.UnixMicro() + i64In(-1, 1)
				case 1:
					floor = now.UnixMicro() + i64In(-1, 1e6)
				case 2:
					floor = 1<<53 - 1<<32
				}
				src = srcAcquire
				args = fullAcquireArgv(h, n, limit, oneOf(rnd, []int64{1, 1000, 60000}), oneOf(rnd, []int64{0, 0, 20000, 60000}),
					try, oneOf(rnd, []string{"0", "1"}), oneOf(rnd, []string{"", "v", "v\n q", " q", "7 8 9", "\n"}), above, floor)
				if rnd.IntN(2) == 0 {
					args = trimmedAcquireArgv(args)
				}
			case 4, 5: // release
				want := int64(0)
				switch intIn(0, 2) {
				case 1:
					want = fences[h]
				case 2:
					want = fences[h] + i64In(-1, 1)
				}
				src, args = srcRelease, []any{h, max(want, 0)}
			case 6: // leave
				src, args = srcLeave, []any{h, oneOf(rnd, []int64{0, fences[h], fences[h] - 1})}
				if tries > 0 && rnd.IntN(2) == 0 {
					args = append(args, "t"+strconv.Itoa(intIn(1, tries)), oneOf(rnd, []int64{20000, 60000}))
				}
			case 7: // watch
				src, args = srcWatch, []any{oneOf(rnd, []int64{1, 30000})}
			case 8: // extend
				src, args = srcExtend, []any{h, oneOf(rnd, []int64{1, 60000})}
			case 9: // the clock moves
				now = now.Add(time.Duration(oneOf(rnd, []int64{1, 999, 1000, 20000, 60001})) * time.Millisecond)
				continue
			}
			var snaps [2]string
			var replies [2]any
			for j, tw := range []*twin{fast, general} {
				code := rediscore.Sources[src]
				if p, ok := srcs[src]; ok {
					code = p[j]
				}
				r, err := evalAt(ctx, tw.c, now, code, keys, args...).Result()
				replies[j] = r
				snaps[j] = tw.snapshot(t, key, fmt.Sprintf("%v / %v", r, err))
			}
			if !sameSnapshots(snaps[0], snaps[1]) {
				t.Fatalf("history of seed %d, step %d: %s %q at %v: with the fast paths\n%s\nwithout\n%s", seed, i, name(src), args, now, snaps[0], snaps[1])
			}
			noteFences(fences, src, args, replies[0])
		}
	}
}

// snapExpiry matches the expiry of a key in a snapshot (see twin.snapshot), in ms.
var snapExpiry = regexp.MustCompile(`pttl (-?[0-9]+)ms`)

// sameSnapshots reports whether two snapshots are the same but for their keys' expiries, which
// may differ by the time between the two servers' reading them (up to 5 s either way, for a
// loaded machine's stalls), not by more; a key without expiry (-1) or without key (-2) must be
// so in both.
func sameSnapshots(a, b string) bool {
	if snapExpiry.ReplaceAllString(a, "pttl") != snapExpiry.ReplaceAllString(b, "pttl") {
		return false
	}
	ea, eb := snapExpiry.FindAllStringSubmatch(a, -1), snapExpiry.FindAllStringSubmatch(b, -1)
	for i := range ea {
		x, errx := strconv.ParseInt(ea[i][1], 10, 64)
		y, erry := strconv.ParseInt(eb[i][1], 10, 64)
		if errx != nil || erry != nil || (x < 0 || y < 0) && x != y || x-y > 5000 || y-x > 5000 {
			return false
		}
	}
	return true
}

// oneOf returns one of xs, drawn uniformly.
func oneOf[T any](rnd *rand.Rand, xs []T) T { return xs[rnd.IntN(len(xs))] }

// name names a script by its index in rediscore.Sources.
func name(src int) string {
	return map[int]string{srcAcquire: "acquire", srcRelease: "release", srcLeave: "leave", srcWatch: "watch", srcExtend: "extend"}[src]
}

// noteFences records the fences a reply reports granted, by holder.
func noteFences(fences map[string]int64, src int, args []any, r any) {
	a, _ := r.([]any)
	if n, ok := r.(int64); ok && (src == srcAcquire || src == srcRelease) {
		a = asArray(src, n)
	}
	switch {
	case src == srcAcquire && len(a) >= 2 && a[0] == int64(1):
		fences[args[0].(string)] = a[1].(int64)
	case src == srcRelease || src == srcLeave:
		start := 0
		if src == srcRelease {
			start = 1
		}
		for i := start; i+1 < len(a); i += 2 {
			if h, ok := a[i].(string); ok {
				if f, ok := a[i+1].(int64); ok {
					fences[h] = f
				}
			}
		}
	case src == srcExtend && len(a) >= 3 && a[0] == int64(1):
		fences[args[0].(string)] = a[2].(int64)
	}
}

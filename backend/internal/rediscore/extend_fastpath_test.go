package rediscore_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/internal/testenv"
)

// Extend's fast path against its general path: for every state of a key's
// four Redis keys, extend with its fast path and extend without it (generalSource) leave the
// same keys, values, expiries and messages, and make the same reply or error. The states here
// are the ones TestFastPathsDoWhatTheGeneralPathsDo does not have: every tail the
// entry pattern '( ?q?)\n?(.*)$' can capture, numbers in every form %d+ and tonumber read
// (leading zeros, at and past 2^53, 400 digits, "1e20" whose %d+ stops at the e), counters in
// the forms tonumber accepts (exponent, hex, spaces, -0), odd field names (':' alone, ':fence',
// NUL bytes), a lease whose expiry is now, thousands of leases, keep at its edge for 1 ms and
// for the maximum TTL (2^50 ms, layout.go's maxMs), a hash with no expiry, and each of the four
// keys of another Redis type.

// keyState is a key's state: its lease hash (nil: none), and setup for the rest (the line's
// keys, keys of other types, the hash's expiry), run in the same transaction after the hash.
type keyState struct {
	hash  map[string]string
	order []string // of the hash's entries when written (nil: sorted), see fastState
	setup func(ctx context.Context, p redis.Pipeliner, ks []string)
}

// withKeep returns a lease hash of entries h, written in order, with a keep entry of 0 (as
// absent) last when h has none: every hash of this layout has one, whose name carries its
// version.
func withKeep(h map[string]string, order []string) (map[string]string, []string) {
	for f := range h {
		if strings.HasPrefix(f, "keep") {
			return h, order
		}
	}
	h = maps.Clone(h)
	h[rediscore.KeepField] = "0"
	if order != nil {
		order = append(slices.Clone(order), rediscore.KeepField)
	}
	return h, order
}

// runState sets tw's clock to now and key's state to st (the hash's entries in st.order or sorted,
// then setup), runs src with args exactly (an extend's ARGV is holder and ttl: no changed channel)
// and returns the snapshot.
func (tw *twin) runState(t *testing.T, now time.Time, key string, st keyState, src string, args []any) string {
	t.Helper()
	ctx := context.Background()
	if tw.m != nil {
		tw.m.SetTime(now)
	} else {
		src = clocked(src)
	}
	ks := rediscore.Keys(key)
	p := tw.c.TxPipeline()
	p.FlushAll(ctx)
	if st.hash != nil {
		if len(st.hash) > 0 {
			st.hash, st.order = withKeep(st.hash, st.order)
			kv := make([]any, 0, 2*len(st.hash))
			order := st.order
			if order == nil {
				order = slices.Sorted(maps.Keys(st.hash))
			}
			for _, f := range order {
				kv = append(kv, f, st.hash[f])
			}
			p.HSet(ctx, ks[0], kv...)
		}
		p.Expire(ctx, ks[0], 30*24*time.Hour)
	}
	if st.setup != nil {
		st.setup(ctx, p, ks)
	}
	if tw.m == nil {
		setClock(ctx, p, now)
	}
	if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	var r any
	var err error
	if tw.m == nil {
		r, err = evalCached(ctx, tw.c, src, ks, args, nil).Result()
	} else {
		r, err = tw.c.Eval(ctx, src, ks, args...).Result()
	}
	return tw.snapshot(t, key, fmt.Sprintf("%#v / %v", r, err))
}

// firstForeign is the entry a WRONGTYPE error names: the first of the hash's entries not ours
// in HGETALL's order, which for a hash stored as a hash table (an entry over 64 bytes, or over
// 128 entries) follows the server's random hash seed, so two servers may name different ones.
var firstForeign = regexp.MustCompile(`\(entry ".*" is not ours\)`)

// sameForeign is got and want with the entry a WRONGTYPE error names made the same, when there
// are several to name.
func sameForeign(got, want string) (string, string) {
	return firstForeign.ReplaceAllString(got, "(entry … is not ours)"), firstForeign.ReplaceAllString(want, "(entry … is not ours)")
}

// hugeNumber finds a number of 20 digits or more: at or past 2^63, which gopher-lua's tonumber
// (miniredis) reads as nil where Redis's Lua reads a double, so that on miniredis the general
// path fails on arithmetic with nil where Redis's would not, and the fast path, which reads no
// other lease's permits, does not: a difference of the test double, not of the script.
var hugeNumber = regexp.MustCompile(`\d{20,}`)

func TestExtendFastPathMatchesTheGeneralPath(t *testing.T) {
	testenv.SkipShort(t, "a table of thousands of script calls (TestExtendFastPathMatchesOnWiderDrawnStates draws some)")
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	nowMs := now.UnixMilli()
	s := func(x int64) string { return strconv.FormatInt(x, 10) }
	const halfWeek, ttl, maxTTL = 302400000, 60000, int64(1) << 50
	far := s(nowMs + 4*halfWeek)
	live := s(nowMs + ttl)
	base := func(extra map[string]string) keyState {
		h := map[string]string{"fence": "7", "limit": "2", "seq": "3", rediscore.KeepField: far}
		for f, v := range extra {
			if v == "" {
				delete(h, f)
			} else {
				h[f] = v
			}
		}
		return keyState{hash: h}
	}
	self := func(entry string, extra map[string]string) keyState {
		st := base(extra)
		st.hash[":h"] = entry
		return st
	}
	states := map[string]keyState{}
	// Every tail after the expiry: what ( ?q?) and \n? take, and what is left for the value.
	for i, tail := range []string{"", "\n", " ", " q", " q\n", "q", "qq", " qq", " qq\nv", " q q", "  q", "\r\nv", "\n\n",
		"\n q", " q\n\x00", "\x00", "\nq", " \n q", "x\ny", " q\n q\n", "\n" + strings.Repeat("v\n q", 256),
		" q" + strings.Repeat("\x00\n", 300), "é\n", " Q", "\tq", "0", " 0", "\n0",
		"+60000", " q+60000\nv", "+0", "+007", " q+", "+12345678901234567890", "++5", "+5+5", " 5"} {
		states[fmt.Sprintf("self, tail %02d %q", i, tail[:min(len(tail), 12)])] = self("1 7 "+live+tail, nil)
		states[fmt.Sprintf("self and other, tail %02d", i)] = self("1 7 "+live, map[string]string{":o": "1 6 " + live + tail})
	}
	// Numbers in the holder's entry.
	for name, entry := range map[string]string{
		"permits 2^53-1":          "9007199254740991 7 " + live,
		"fence 2^53-1, 2 permits": "2 9007199254740991 " + live,
		"permits 2^31-1":          "2147483647 7 " + live,
		"fence 1":                 "1 1 " + live,
		"fence 16 digits":         "1 1000000000000000 " + live,
		"fence 2^53+1":            "1 9007199254740993 " + live,
		"permits 2^53":            "9007199254740992 7 " + live,
		"permits 00":              "00 7 " + live,
		"fence 00":                "1 00 " + live,
		"expiry 0-led":            "1 7 000" + live,
		"expiry 400 digits":       "1 7 " + strings.Repeat("9", 400),
		"expiry 1e20":             "1 7 1e20",
		"expiry now":              "1 7 " + s(nowMs),
		"expiry now+1":            "1 7 " + s(nowMs+1),
		"expiry now-1":            "1 7 " + s(nowMs-1),
		"expiry 2^53":             "1 7 9007199254740993",
		"permits 400 digits":      strings.Repeat("9", 400) + " 7 " + live,
		"leading space":           " 1 7 " + live,
		"two spaces":              "1  7 " + live,
		"negative expiry":         "1 7 -" + live,
		"two numbers":             "1 7",
		"empty":                   "",
		"expiry with point":       "1 7 " + live + ".5",
		"tabs":                    "1\t7\t" + live,
	} {
		states["self, "+name] = self(entry, nil)
		states["self, "+name+", other live"] = self(entry, map[string]string{":o": "1 6 " + live})
	}
	// Other leases: live in odd forms (the general path reads them as leases), at now, foreign.
	for name, entry := range map[string]string{
		"0-led expiry":         "1 6 0" + live,
		"400-digit expiry":     "1 6 " + strings.Repeat("9", 400),
		"expiry 1e99":          "1 6 1e99",
		"expiry now":           "1 6 " + s(nowMs),
		"expiry now+1":         "1 6 " + s(nowMs+1),
		"0 permits":            "0 6 " + live,
		"garbage tail":         "1 6 " + live + "garbage",
		"NUL tail":             "1 6 " + live + "\x00",
		"permits past 2^53":    "99999999999999999999 6 " + live,
		"ancient":              "1 2 3",
		"leading space":        " 1 6 " + live,
		"two numbers":          "1 6",
		"empty":                "",
		"negative expiry":      "1 6 -" + live,
		"untaken with value":   "1 6 " + live + " q\nv",
		"no space after fence": "1 6" + live,
	} {
		states["self and other, "+name] = self("1 7 "+live, map[string]string{":o": entry})
		states["other alone, "+name] = base(map[string]string{":o": entry})
	}
	// Counters in every form tonumber reads, and ones it does not.
	for name, c := range map[string][2]string{
		"limit 1e3": {"limit", "1e3"}, "limit spaced": {"limit", " 2 "}, "limit hex": {"limit", "0x10"},
		"limit -0": {"limit", "-0"}, "limit 2.0": {"limit", "2.0"}, "limit newline": {"limit", "2\n"},
		"limit 2^53-1": {"limit", "9007199254740991"}, "limit 2^53": {"limit", "9007199254740992"},
		"limit 0-led": {"limit", "002"}, "limit 0": {"limit", "0"}, "limit NUL": {"limit", "2\x00"},
		"keep 1e20": {rediscore.KeepField, "1e20"}, "keep hex far": {rediscore.KeepField, fmt.Sprintf("0x%x", nowMs+4*halfWeek)},
		"keep -0": {rediscore.KeepField, "-0"}, "keep 0": {rediscore.KeepField, "0"}, "keep inf": {rediscore.KeepField, "inf"},
		"keep 2^53-1": {rediscore.KeepField, "9007199254740991"}, "keep fraction": {rediscore.KeepField, far + ".5"},
		"fence 1e3": {"fence", "1e3"}, "seq -1": {"seq", "-1"}, "watch nan": {"watch", "nan"},
		"watch live": {"watch", s(nowMs + 30000)}, "line live": {"line", s(nowMs + 30000)},
		"left live": {"left", s(nowMs + 30000)}, "watch 1e15": {"watch", "1e15"},
	} {
		states["self, "+name] = self("1 7 "+live+"\nv", map[string]string{c[0]: c[1]})
	}
	// Odd field names.
	for name, extra := range map[string]map[string]string{
		"':' alone, a lease":     {":": "1 5 " + live},
		"':' alone, a number":    {":": "1"},
		"':fence', a number":     {":fence": "5"},
		"':fence', a lease":      {":fence": "1 5 " + live},
		"'::h', a lease":         {"::h": "1 5 " + live},
		"':h\\x00', a lease":     {":h\x00": "1 5 " + live},
		"'keep\\x00'":            {"keep\x00": far},
		"'\\x00'":                {"\x00": "1"},
		"empty name":             {"": "1"},
		"'h' without ':'":        {"h": "1 5 " + live},
		"'Fence'":                {"Fence": "1"},
		"'fence ' with a space":  {"fence ": "1"},
		"'watch' a lease's text": {"watch": "1 5 " + live},
	} {
		states["self, "+name] = self("1 7 "+live, extra)
	}
	// Keep at its edge for every TTL the calls send, and a hash with no expiry.
	for _, d := range []int64{1, ttl, maxTTL} {
		states[fmt.Sprintf("self, keep at the edge of %d ms", d)] = self("1 7 "+live, map[string]string{rediscore.KeepField: s(nowMs + d)})
		states[fmt.Sprintf("self, keep a ms short of %d ms", d)] = self("1 7 "+live, map[string]string{rediscore.KeepField: s(nowMs + d - 1)})
		states[fmt.Sprintf("self untaken with value, keep a ms short of %d ms", d)] = self("1 7 "+live+" q\nv",
			map[string]string{rediscore.KeepField: s(nowMs + d - 1)})
	}
	noExpiry := self("1 7 "+live, nil)
	noExpiry.setup = func(ctx context.Context, p redis.Pipeliner, ks []string) { p.Persist(ctx, ks[0]) }
	states["self, hash without expiry"] = noExpiry
	noExpiryShort := self("1 7 "+live, map[string]string{rediscore.KeepField: ""})
	noExpiryShort.setup = noExpiry.setup
	states["self, hash without expiry or keep"] = noExpiryShort
	// Hundreds of leases (thousands under LEASEHOLD_SOAK=1; past 128 entries the server keeps
	// the hash as a hash table, not a listpack): all live; one expired in the middle of the
	// hash's order; one foreign at its end; the holder absent.
	others := testenv.Pick(300, 1000)
	mid, last := fmt.Sprintf("o%04d", others/2), fmt.Sprintf("o%04d", others-1)
	many := func(n int, extra map[string]string) keyState {
		st := base(map[string]string{"limit": s(int64(n + 1))})
		for i := range n {
			st.hash[fmt.Sprintf(":o%04d", i)] = fmt.Sprintf("1 %d %s", 8+i, live)
		}
		maps.Copy(st.hash, extra)
		return st
	}
	states["self and many others"] = many(others, map[string]string{":h": "1 7 " + live + " q\nv"})
	states["self and many others, one expired"] = many(others, map[string]string{":h": "1 7 " + live, ":" + mid: "1 5 " + s(nowMs)})
	states["self and many others, one foreign"] = many(others, map[string]string{":h": "1 7 " + live, ":" + last: "x"})
	states["many others"] = many(others, nil)
	// Keys of other types: the lease key (WRONGTYPE, nothing written), and the line's (extend
	// does not touch them).
	for i, typ := range []string{"string", "list", "set", "zset", "hash"} {
		for k := range 4 {
			if own := map[bool]string{true: "zset", false: "hash"}[k%2 == 1]; typ == own {
				continue // the key's own type
			}
			st := self("1 7 "+live, nil)
			if k == 0 {
				st.hash = nil
			}
			st.setup = func(ctx context.Context, p redis.Pipeliner, ks []string) {
				switch typ {
				case "string":
					p.Set(ctx, ks[k], "theirs", 0)
				case "list":
					p.RPush(ctx, ks[k], "theirs")
				case "set":
					p.SAdd(ctx, ks[k], "theirs")
				case "zset":
					p.ZAdd(ctx, ks[k], redis.Z{Score: 1, Member: "theirs"})
				case "hash":
					p.HSet(ctx, ks[k], "theirs", "1")
				}
				p.PExpire(ctx, ks[k], 30*24*time.Hour)
			}
			states[fmt.Sprintf("key %d a %s (%d)", k, typ, i)] = st
		}
	}
	// A live line and watch around the holder's untaken grant.
	line := self("1 7 "+live+" q\nv", map[string]string{"line": s(nowMs + 60000), "watch": s(nowMs + 30000), "seq": "5"})
	line.setup = func(ctx context.Context, p redis.Pipeliner, ks []string) {
		p.ZAdd(ctx, ks[1], redis.Z{Score: 5, Member: "w"})
		p.HSet(ctx, ks[2], "w", "1 "+s(nowMs+60000)+" 1 60000 0 0 wchan")
		p.PExpire(ctx, ks[1], time.Minute)
		p.PExpire(ctx, ks[2], time.Minute)
	}
	states["self untaken, line and watch live"] = line

	calls := map[string][]any{
		"extend":              {"h", ttl},
		"extend for 1 ms":     {"h", 1},
		"extend for 2^50 ms":  {"h", maxTTL},
		"extend of holder ''": {"", ttl},
		"extend of 'fence'":   {"fence", ttl},
		"extend of 'o'":       {"o", ttl},
		"extend of another":   {mid, ttl},
		"extend of 'h\\x00'":  {"h\x00", ttl},
		"extend of ':h'":      {":h", ttl},
	}
	general := generalSource(t, srcExtend)
	for server, real := range twinServers() {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			fast, gen := newTwin(t, real), newTwin(t, real)
			for _, sn := range slices.Sorted(maps.Keys(states)) {
				if !real && slices.ContainsFunc(slices.Collect(maps.Values(states[sn].hash)), hugeNumber.MatchString) {
					continue
				}
				for _, cn := range slices.Sorted(maps.Keys(calls)) {
					got := fast.runState(t, now, "k", states[sn], hashSource(t, srcExtend), slices.Clone(calls[cn]))
					want := gen.runState(t, now, "k", states[sn], general, slices.Clone(calls[cn]))
					if !sameSnapshots(got, want) {
						t.Errorf("%s on %s: with the fast path\n%.3000s\nwithout\n%.3000s", cn, sn, got, want)
					}
				}
			}
		})
	}
}

// TestExtendFastPathMatchesOnWiderDrawnStates: as TestFastPathsMatchOnDrawnStates
// for extend, on states it does not draw: up to six other leases, numbers with leading zeros or
// at 2^53, expiries a ms either side of now or far, every tail, untaken grants with values,
// foreign-looking entries, counters in odd forms, the holder ” (the field ':'), and TTLs from
// 1 ms to 2^50 ms with keep at their edge.
func TestExtendFastPathMatchesOnWiderDrawnStates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 999999000, time.UTC)
	nowMs := now.UnixMilli()
	s := func(x int64) string { return strconv.FormatInt(x, 10) }
	general := generalSource(t, srcExtend)
	fast, gen := newTwin(t, true), newTwin(t, true)
	tails := []string{"", " q", "\nv", " q\n q\n", " ", "q", " qq", "\n", " q\n", "x", "\n\x00", " \n q", "\r\n",
		"+1", "+60000", " q+60000\nv", "+0", "+07"}
	rapid.Check(t, func(rt *rapid.T) {
		ttl := rapid.SampledFrom([]int64{1, 1000, 60000, 1 << 50}).Draw(rt, "ttl")
		num := func(label string, normal string) string {
			return rapid.SampledFrom([]string{normal, normal, normal, "0" + normal, "0", "9007199254740991",
				"9007199254740992", "99999999999999999999"}).Draw(rt, label)
		}
		exp := func(label string) string {
			switch rapid.IntRange(0, 3).Draw(rt, label+" kind") {
			case 0:
				return s(nowMs + rapid.Int64Range(-1, 1).Draw(rt, label))
			case 1:
				return s(nowMs + ttl)
			case 2:
				return "0" + s(nowMs+60000)
			default:
				return strings.Repeat("9", rapid.IntRange(16, 30).Draw(rt, label+" digits"))
			}
		}
		entry := func(h string) string {
			return num(h+" permits", s(int64(rapid.IntRange(1, 2).Draw(rt, h+" n")))) + " " +
				num(h+" fence", s(rapid.Int64Range(5, 9).Draw(rt, h+" f"))) + " " + exp(h+" exp") +
				rapid.SampledFrom(tails).Draw(rt, h+" tail")
		}
		st := keyState{hash: map[string]string{}}
		for _, c := range []string{"fence", "limit", "seq", "watch", "line", "left", rediscore.KeepField} {
			switch rapid.IntRange(0, 3).Draw(rt, c+" kind") {
			case 0: // absent
			case 1:
				switch c {
				case rediscore.KeepField:
					st.hash[c] = s(nowMs + ttl + rapid.Int64Range(-1, 1).Draw(rt, c))
				case "limit", "seq", "fence":
					st.hash[c] = s(rapid.Int64Range(0, 3).Draw(rt, c))
				default:
					st.hash[c] = s(nowMs + rapid.Int64Range(-1, 1).Draw(rt, c))
				}
			case 2:
				st.hash[c] = s(rapid.Int64Range(0, 1<<53-1).Draw(rt, c))
			default:
				st.hash[c] = rapid.SampledFrom([]string{"1e3", " 2", "0x10", "-0", "2.0", "02", "1.5", "-1", "x", ""}).Draw(rt, c)
			}
		}
		holders := []string{"h", "", "o", "p", "q", "r", "s", "fence"}
		for _, h := range holders[:rapid.IntRange(0, len(holders)).Draw(rt, "leases")] {
			if rapid.IntRange(0, 9).Draw(rt, h+" foreign") == 0 {
				st.hash[":"+h] = rapid.SampledFrom([]string{"garbage", "5", "1 2", " 1 2 3", ""}).Draw(rt, h+" entry")
			} else {
				st.hash[":"+h] = entry(h)
			}
		}
		if rapid.IntRange(0, 9).Draw(rt, "foreign field") == 0 {
			st.hash[rapid.SampledFrom([]string{"other", "Fence", "", "keep "}).Draw(rt, "foreign name")] = "1"
		}
		if line, _ := strconv.ParseInt(st.hash["line"], 10, 64); line > nowMs && rapid.Bool().Draw(rt, "place") {
			st.setup = func(ctx context.Context, p redis.Pipeliner, ks []string) {
				p.ZAdd(ctx, ks[1], redis.Z{Score: 1, Member: "w"})
				p.HSet(ctx, ks[2], "w", "1 "+s(line)+" 2 60000 0 0 wchan")
			}
		}
		if len(st.hash) == 0 && rapid.Bool().Draw(rt, "no hash") {
			st.hash = nil
		}
		args := []any{rapid.SampledFrom([]string{"h", "h", "h", "", "o", "fence", "z"}).Draw(rt, "holder"), ttl}
		got := fast.runState(t, now, "k", st, hashSource(t, srcExtend), slices.Clone(args))
		want := gen.runState(t, now, "k", st, general, slices.Clone(args))
		if got, want := sameForeign(got, want); !sameSnapshots(got, want) {
			rt.Fatalf("extend %q on %#v: with the fast path\n%s\nwithout\n%s", args, st.hash, got, want)
		}
	})
}

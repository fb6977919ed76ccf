package peerbench

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/bench/internal/lockers"
	"github.com/leasehold/leasehold/bench/internal/wire"
)

func TestMedianOfOddAndEvenCounts(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{9, 1, 5}, 5},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1, 100, 10}, 10},
	} {
		in := append([]float64(nil), c.xs...)
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
		for i := range in {
			if in[i] != c.xs[i] {
				t.Fatalf("median reordered its input: %v, was %v", c.xs, in)
			}
		}
	}
}

func TestFloorRowMediansEachFigureOnItsOwn(t *testing.T) {
	r := &floorRow{samples: []floorSample{{rate: 100, client: 9, server: 1}, {rate: 300, client: 1, server: 3}, {rate: 200, client: 5, server: 9}}}
	got, ok := r.medians()
	if want := (floorSample{rate: 200, client: 5, server: 3}); !ok || got != want {
		t.Fatalf("medians = %+v, %v; want %+v, true", got, ok, want)
	}
	if _, ok := (&floorRow{}).medians(); ok {
		t.Fatal("a row with no samples has medians")
	}
}

func TestFloorTablesRatiosAgainstTheBaseOfEachGroup(t *testing.T) {
	libs := []lockers.Shared{
		{Name: "floor", Label: "floor"},
		{Name: "base", Label: "base", Base: true},
		{Name: "ours", Label: "ours"},
		{Name: "rlbase", Label: "rlbase", Base: true, Redlock: true},
		{Name: "rl", Label: "rl", Redlock: true},
	}
	gs := floorGroups(libs, 16)
	if len(gs) != 3 || len(gs[0].rows) != 3 || gs[1].rows[0].workers != 16 || len(gs[2].rows) != 2 || gs[2].rows[1].workers != 1 {
		t.Fatalf("groups laid out wrong: %+v", gs)
	}
	// set gives row i of group g its samples, numbering their rounds from 1; a zero sample is a
	// round that failed.
	set := func(g, i int, ss ...floorSample) {
		for n, x := range ss {
			if x != (floorSample{}) {
				x.round = n + 1
				gs[g].rows[i].samples = append(gs[g].rows[i].samples, x)
			}
		}
	}
	set(0, 0, floorSample{rate: 15000, client: 40, server: 20}, floorSample{rate: 13000, client: 30, server: 28}, floorSample{rate: 14000, client: 35, server: 24})
	set(0, 1, floorSample{rate: 10000, client: 50, server: 40}, floorSample{rate: 10000, client: 50, server: 40}, floorSample{rate: 10000, client: 50, server: 40})
	set(0, 2, floorSample{rate: 8000, client: 65, server: 60}, floorSample{}, floorSample{rate: 9000, client: 60, server: 60})
	set(1, 0, floorSample{rate: 20000, client: 30, server: 20}, floorSample{rate: 20000, client: 30, server: 20}, floorSample{rate: 20000, client: 30, server: 20})
	// The Redlock base swings from round to round; the ratios follow it round by round: rl's
	// figures are 0.8×, 0.75× and 1.1× the base's, so its ratio is 0.80×, not the 0.82× of
	// its median figure (9 000) over the base's (11 000).
	set(2, 0, floorSample{rate: 10000, client: 300, server: 200}, floorSample{rate: 12000, client: 200, server: 100}, floorSample{rate: 11000, client: 250, server: 150})
	set(2, 1, floorSample{rate: 8000, client: 330, server: 500}, floorSample{rate: 9000, client: 240, server: 300}, floorSample{rate: 12100, client: 250, server: 300})
	got := floorTables(gs, 3)
	for _, want := range []string{
		"1 worker, one key (medians of 3 rounds; ratios to base):",
		"| floor | 14 000 (1.40×) | 35.0 (0.70×) | 24.0 (0.60×) |",
		"| base | 10 000 (1.00×) | 50.0 (1.00×) | 40.0 (1.00×) |",
		"| ours | 8 500 (0.85×) ‡2 | 62.5 (1.25×) ‡2 | 60.0 (1.50×) ‡2 |", // over rounds 1 and 3
		"16 workers, a key each (medians of 3 rounds; ratios to base):",
		"| floor | 20 000 |",               // no base figures in this group: no ratios
		"| base | error | error | error |", // no round measured
		"Redlock(3), 1 worker, one key (medians of 3 rounds; ratios to rlbase):",
		"| rl | 9 000 (0.80×) | 250 (1.10×) | 300 (2.50×) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("tables lack %q:\n%s", want, got)
		}
	}
}

func TestRoundRatiosAreThoseOfTheRound(t *testing.T) {
	g := floorGroup{rows: []*floorRow{
		{lib: lockers.Shared{Name: "base", Base: true}, samples: []floorSample{{round: 1, rate: 100, client: 10, server: 10}, {round: 2, rate: 200, client: 20, server: 10}}},
		{lib: lockers.Shared{Name: "ours"}, samples: []floorSample{{round: 1, rate: 50, client: 20, server: 30}, {round: 2, rate: 150, client: 24, server: 25}}},
		{lib: lockers.Shared{Name: "failed"}, samples: []floorSample{{round: 1, rate: 90, client: 10, server: 10}}},
	}}
	if got, want := roundRatios(g, 2), "ours 0.75 1.20 2.50"; got != want {
		t.Fatalf("roundRatios = %q, want %q", got, want)
	}
	if got := roundRatios(floorGroup{rows: g.rows[1:]}, 1); got != "" {
		t.Fatalf("roundRatios with no base = %q, want none", got)
	}
}

func TestRotateGivesEveryRowEveryPlace(t *testing.T) {
	xs := []string{"a", "b", "c"}
	for k, want := range []string{"abc", "bca", "cab", "abc"} {
		if got := strings.Join(rotate(xs, k), ""); got != want {
			t.Errorf("rotate(abc, %d) = %s, want %s", k, got, want)
		}
	}
	if strings.Join(xs, "") != "abc" {
		t.Fatalf("rotate changed its input: %v", xs)
	}
	if got := rotate([]string(nil), 2); len(got) != 0 {
		t.Fatalf("rotate(nil) = %v", got)
	}
}

func TestFloorIsCutFromTheScenarioList(t *testing.T) {
	if rest, floor := cutFloor("uncontended, floor,redlock"); !floor || rest != "uncontended,redlock" {
		t.Fatalf("cutFloor = %q, %v", rest, floor)
	}
	if rest, floor := cutFloor("idle"); floor || rest != "idle" {
		t.Fatalf("cutFloor = %q, %v", rest, floor)
	}
	if rest, floor := cutFloor("floor"); !floor || rest != "" {
		t.Fatalf("cutFloor = %q, %v", rest, floor)
	}
}

func TestOnlyNamesFloorLibrariesWhenTheFloorRuns(t *testing.T) {
	b := Backend{
		Libs:  []lockers.Lib{{Name: "leasehold-goredis"}, {Name: "redsync"}, {Name: "valkeylock"}},
		Floor: []lockers.Shared{{Name: "setnx"}, {Name: "redislock"}, {Name: "leasehold-goredis"}, {Name: "redsync"}},
	}
	libs, floor, err := splitOnly(b, "leasehold-goredis,setnx,valkeylock", true)
	if err != nil || libs != "leasehold-goredis,valkeylock" || strings.Join(floor, ",") != "leasehold-goredis,setnx" {
		t.Fatalf("splitOnly = %q, %v, %v", libs, floor, err)
	}
	if got := pickFloor(b.Floor, floor); len(got) != 2 || got[0].Name != "setnx" || got[1].Name != "leasehold-goredis" {
		t.Fatalf("pickFloor = %+v", got)
	}
	if got := pickFloor(b.Floor, nil); len(got) != 4 {
		t.Fatalf("pickFloor with no names = %+v, want all", got)
	}
	if _, _, err := splitOnly(b, "setnx,nosuch", true); err == nil {
		t.Fatal("an unknown name was accepted")
	}
	if _, _, err := splitOnly(b, "valkeylock", true); err == nil {
		t.Fatal("an -only naming no floor library was accepted with the floor chosen")
	}
	if libs, floor, err := splitOnly(b, "anything", false); err != nil || libs != "anything" || floor != nil {
		t.Fatalf("without the floor, splitOnly = %q, %v, %v; want the list untouched", libs, floor, err)
	}
}

func TestInfoGivesCPUScriptsAndCallsByCommand(t *testing.T) {
	st := parseInfo("# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n# Commandstats\r\n" +
		"cmdstat_fcall:calls=10,usec=200,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=4,usec=40,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hset:calls=10,usec=30,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|id:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n")
	if st.cpu != 3750*time.Millisecond {
		t.Errorf("cpu = %v, want 3.75s", st.cpu)
	}
	if st.scriptCalls != 14 || st.scriptUsec != 240 {
		t.Errorf("scripts = %d calls, %d µs; want 14, 240", st.scriptCalls, st.scriptUsec)
	}
	want := wire.Counts{"FCALL": 10, "EVALSHA": 4, "HSET": 10, "CLIENT": 3}
	if len(st.calls) != len(want) {
		t.Errorf("calls = %v, want %v", st.calls, want)
	}
	for k, v := range want {
		if st.calls[k] != v {
			t.Errorf("calls = %v, want %v", st.calls, want)
			break
		}
	}
}

func TestOthersLineGivesTheMedianAndBusiestWindow(t *testing.T) {
	gs := []floorGroup{{rows: []*floorRow{
		{samples: []floorSample{{others: 0.5}, {others: -1}, {others: 1.5}}},
		{samples: []floorSample{{others: 1}}},
	}}}
	if got := othersLine(gs); !strings.Contains(got, "used 1.00 cores in the median window, 1.50 in the busiest") {
		t.Fatalf("othersLine = %q", got)
	}
	if got := othersLine([]floorGroup{{rows: []*floorRow{{samples: []floorSample{{others: -1}}}}}}); got != "" {
		t.Fatalf("othersLine with nothing known = %q, want none", got)
	}
}

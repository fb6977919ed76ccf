package peerbench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/bench/internal/lockers"
	"github.com/leasehold/leasehold/bench/internal/wire"
)

// The floor scenario measures the uncontended lock/unlock pair of each Shared library in this
// one process, every worker of a library on one client shared by all of them, with 1 worker
// and with e.workers workers on a key each (Redlock libraries: 1 worker). It runs every library
// once per round, all of them in turn, for the rounds asked, and reports the medians over the
// rounds, and the median over the rounds of each figure's ratio to the group's base library's in
// the same round, so a swing of the machine's speed hits every library alike. Per pair it reports this process's CPU (getrusage) and the servers' (INFO
// cpu): the libraries run one after another, never at once, so each one's window is its own.

// floorSample is one library's figures in one round.
type floorSample struct {
	round  int
	rate   float64 // pairs/s
	client float64 // this process's CPU, µs per pair
	server float64 // the servers' CPU, µs per pair
	others float64 // the cores other processes used over the window, on average; -1: unknown
}

// floorRow is one library at one worker count, over the rounds.
type floorRow struct {
	lib     lockers.Shared
	workers int
	samples []floorSample
	notes   []string
	cmds    wire.Counts // the servers' commands over every round's window (INFO commandstats)
	pairs   int64       // the pairs of those windows
}

// floorGroup is the rows measured against one base row.
type floorGroup struct {
	title string
	rows  []*floorRow
}

// floorGroups lays out libs: on one server with 1 worker and with workers workers, then the
// Redlock libraries with 1 worker. Groups with no rows are left out.
func floorGroups(libs []lockers.Shared, workers int) []floorGroup {
	gs := []floorGroup{
		{title: "1 worker, one key"},
		{title: fmt.Sprintf("%d workers, a key each", workers)},
		{title: "Redlock(3), 1 worker, one key"},
	}
	for _, l := range libs {
		if l.Redlock {
			gs[2].rows = append(gs[2].rows, &floorRow{lib: l, workers: 1})
			continue
		}
		gs[0].rows = append(gs[0].rows, &floorRow{lib: l, workers: 1})
		gs[1].rows = append(gs[1].rows, &floorRow{lib: l, workers: workers})
	}
	return slices.DeleteFunc(gs, func(g floorGroup) bool { return len(g.rows) == 0 })
}

// meter reads, at the start and the end of a measured window, this process's CPU and the CPU of
// the servers at addrs; the first error is kept.
type meter struct {
	addrs   []string
	stats   func(addr string) (serverStats, error)
	client0 time.Duration
	server0 time.Duration
	client  time.Duration // this process's CPU over the window
	server  time.Duration // the servers' CPU over the window, summed
	calls0  []wire.Counts
	calls   wire.Counts // the servers' commands over the window, summed
	profile string      // when not "", the file the window's CPU profile goes to
	pprofTo *os.File
	// The machine's CPU, every process's, over the window, and the window's wall time; ok
	// false where /proc/stat cannot be read.
	machine0, machine time.Duration
	machineOK         bool
	t0                time.Time
	wall              time.Duration
	err               error
}

func (m *meter) start() {
	if m == nil {
		return
	}
	m.t0 = time.Now()
	m.machine0, m.machineOK = machineCPU()
	// The servers first: the round trips to read them are then outside this process's window.
	m.server0, m.calls0 = m.servers()
	if m.profile != "" {
		f, err := os.Create(m.profile)
		m.fail(err)
		if err == nil {
			if err := pprof.StartCPUProfile(f); err != nil {
				m.fail(err)
				f.Close()
			} else {
				m.pprofTo = f
			}
		}
	}
	m.client0 = m.process()
}

func (m *meter) stop() {
	if m == nil {
		return
	}
	m.client = m.process() - m.client0
	if m.pprofTo != nil {
		pprof.StopCPUProfile()
		m.fail(m.pprofTo.Close())
	}
	server, calls := m.servers()
	m.server = server - m.server0
	m.calls = wire.Counts{}
	for i, c := range calls {
		if i < len(m.calls0) {
			for k, v := range c.Since(m.calls0[i]) {
				m.calls[k] += v
			}
		}
	}
	machine, ok := machineCPU()
	m.machine, m.machineOK = machine-m.machine0, m.machineOK && ok
	m.wall = time.Since(m.t0)
}

// others returns the cores the machine's other processes used on average over the window (its
// CPU less this process's and the servers'), or -1 where it cannot tell.
func (m *meter) others() float64 {
	if !m.machineOK || m.wall <= 0 {
		return -1
	}
	return max(0, (m.machine-m.client-m.server).Seconds()/m.wall.Seconds())
}

func (m *meter) process() time.Duration {
	cpu, err := processCPU()
	m.fail(err)
	return cpu
}

// servers returns the servers' CPU, summed, and each one's command calls.
func (m *meter) servers() (time.Duration, []wire.Counts) {
	var sum time.Duration
	var calls []wire.Counts
	for _, a := range m.addrs {
		st, err := m.stats(a)
		m.fail(err)
		sum += st.cpu
		calls = append(calls, st.calls)
	}
	return sum, calls
}

func (m *meter) fail(err error) {
	if err != nil && m.err == nil {
		m.err = err
	}
}

// floorOutcome is what floorOnce measured.
type floorOutcome struct {
	sample floorSample
	notes  []string
	cmds   wire.Counts
	pairs  int64
}

// floorOnce measures row's library once: opens its shared client, makes a Locker per worker on
// a key of its own, warms them up, collects garbage, and hammers them for e.duration. Set-up and
// warm-up are outside the measured window.
//
// The warm-up runs every worker at once, so the shared client has dialled the connections the
// run will use before it starts.
func floorOnce(ctx context.Context, e *env, r *floorRow, profile string) (floorOutcome, error) {
	defer settle(runtime.NumGoroutine(), 2*time.Second)
	addrs := []string{e.addr}
	if r.lib.Redlock {
		addrs = e.redlock
	}
	newLocker, closeClient, err := r.lib.Open(addrs)
	if err != nil {
		return floorOutcome{}, err
	}
	defer closeClient()
	i := 0
	ls, err := open(r.workers, func() (lockers.Locker, error) {
		i++
		return newLocker(fmt.Sprintf("peerbench:floor:%s:%d", r.lib.Name, i))
	})
	if err != nil {
		return floorOutcome{}, err
	}
	defer closeAll(ls)
	if err := warmAtOnce(ctx, ls); err != nil {
		return floorOutcome{}, err
	}
	runtime.GC()
	m := &meter{addrs: addrs, stats: e.stats, profile: profile}
	h := hammer(ctx, ls, e.duration, nil, m)
	if m.err != nil {
		return floorOutcome{}, m.err
	}
	if err := h.check(); err != nil {
		return floorOutcome{}, err
	}
	var notes []string
	if n := h.fails.note("pairs"); n != "" {
		notes = append(notes, n)
	}
	if h.stranded > 0 {
		notes = append(notes, fmt.Sprintf("%d of %d workers were still in an acquire %v after the run ended; cancelled then",
			h.stranded, r.workers, grace))
	}
	p := float64(h.pairs)
	return floorOutcome{
		sample: floorSample{rate: h.rate(), client: micros(m.client) / p, server: micros(m.server) / p, others: m.others()},
		notes:  notes, cmds: m.calls, pairs: h.pairs,
	}, nil
}

// settle waits up to limit for the goroutines to fall back to n, so a library's clients have
// wound down before the next one is measured.
func settle(n int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// rotate returns xs started at its k-th element (modulo its length), the rest in order after
// it: round r measures a group's rows from the r-th on, so over as many rounds as rows every
// library has every place in the order once.
func rotate[T any](xs []T, k int) []T {
	if len(xs) == 0 {
		return nil
	}
	k %= len(xs)
	return append(slices.Clone(xs[k:]), xs[:k]...)
}

// warmAtOnce has every Locker take and release its lock a few times, all at once.
func warmAtOnce(ctx context.Context, ls []lockers.Locker) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			for range 5 {
				unlock, err := l.Lock(ctx)
				if err == nil {
					err = unlock()
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

// runFloor measures every row of gs once per round, all rows in turn (each group's order
// rotated by one row a round, so no library always runs first, or right after another), rounds
// times, printing
// each round's figures to stderr as it goes. When profiles is not "", each window's CPU profile
// is written there.
func runFloor(ctx context.Context, e *env, gs []floorGroup, rounds int, profiles string) error {
	for round := 1; round <= rounds; round++ {
		for _, g := range gs {
			for _, r := range rotate(g.rows, round-1) {
				t := time.Now()
				fmt.Fprintf(os.Stderr, "floor %d/%d %-18s %-10s ", round, rounds, r.lib.Name, plural(r.workers, "worker"))
				limit := e.duration + 2*grace + 20*time.Second
				profile := ""
				if profiles != "" {
					profile = filepath.Join(profiles, fmt.Sprintf("%s-%dw-r%d.pprof", r.lib.Name, r.workers, round))
				}
				o, err := bounded(ctx, limit, func(ctx context.Context) (floorOutcome, error) {
					return floorOnce(ctx, e, r, profile)
				})
				if ctx.Err() != nil {
					fmt.Fprintln(os.Stderr)
					return errors.New("interrupted")
				}
				for _, n := range o.notes {
					r.notes = append(r.notes, fmt.Sprintf("round %d: %s", round, n))
				}
				if err != nil {
					if errors.Is(err, errTimeout) {
						err = fmt.Errorf("did not finish within %v; abandoned", limit)
					}
					r.notes = append(r.notes, fmt.Sprintf("round %d: %v", round, err))
					fmt.Fprintf(os.Stderr, "%6.1fs error: %v\n", time.Since(t).Seconds(), err)
					continue
				}
				o.sample.round = round
				r.samples = append(r.samples, o.sample)
				if r.cmds == nil {
					r.cmds = wire.Counts{}
				}
				for k, v := range o.cmds {
					r.cmds[k] += v
				}
				r.pairs += o.pairs
				fmt.Fprintf(os.Stderr, "%6.1fs %s pairs/s, client %s, server %s µs/pair; other processes %s cores\n",
					time.Since(t).Seconds(), integer(o.sample.rate), small(o.sample.client), small(o.sample.server), fixed2(o.sample.others))
				runtime.GC()
			}
		}
		for _, g := range gs {
			if line := roundRatios(g, round); line != "" {
				fmt.Fprintf(os.Stderr, "floor %d/%d %s, ratios to %s (pairs/s, client, server): %s\n", round, rounds, g.title, g.base().lib.Name, line)
			}
		}
	}
	return nil
}

// base returns g's base row, or nil.
func (g floorGroup) base() *floorRow {
	for _, r := range g.rows {
		if r.lib.Base {
			return r
		}
	}
	return nil
}

// roundRatios says each row's ratios to g's base in round, for the progress lines.
func roundRatios(g floorGroup, round int) string {
	base := g.base()
	if base == nil {
		return ""
	}
	var parts []string
	for _, r := range g.rows {
		if r == base {
			continue
		}
		one := &floorRow{samples: slices.DeleteFunc(slices.Clone(r.samples), func(s floorSample) bool { return s.round != round })}
		if q, ok := one.ratios(base); ok {
			parts = append(parts, fmt.Sprintf("%s %s %s %s", r.lib.Name, fixed2(q.rate), fixed2(q.client), fixed2(q.server)))
		}
	}
	return strings.Join(parts, "; ")
}

// median returns the median of xs (the mean of the middle two for an even count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medians returns the medians of r's samples, each figure on its own, and whether it has any.
func (r *floorRow) medians() (floorSample, bool) {
	if len(r.samples) == 0 {
		return floorSample{}, false
	}
	pick := func(f func(floorSample) float64) float64 {
		xs := make([]float64, len(r.samples))
		for i, s := range r.samples {
			xs[i] = f(s)
		}
		return median(xs)
	}
	return floorSample{
		rate:   pick(func(s floorSample) float64 { return s.rate }),
		client: pick(func(s floorSample) float64 { return s.client }),
		server: pick(func(s floorSample) float64 { return s.server }),
	}, true
}

// ratios returns, figure by figure, the median over the rounds that both r and base measured of
// r's figure ÷ base's in that round, and whether there was such a round (NaN for a figure whose
// base was 0 in every such round).
func (r *floorRow) ratios(base *floorRow) (floorSample, bool) {
	var rate, client, server []float64
	add := func(xs *[]float64, v, b float64) {
		if b > 0 {
			*xs = append(*xs, v/b)
		}
	}
	found := false
	for _, s := range r.samples {
		for _, bs := range base.samples {
			if bs.round == s.round {
				found = true
				add(&rate, s.rate, bs.rate)
				add(&client, s.client, bs.client)
				add(&server, s.server, bs.server)
			}
		}
	}
	m := func(xs []float64) float64 {
		if len(xs) == 0 {
			return math.NaN()
		}
		return median(xs)
	}
	return floorSample{rate: m(rate), client: m(client), server: m(server)}, found
}

// floorTables renders each group as a markdown table of medians over rounds, each figure
// followed by the median of its per-round ratios to the group's base row's.
func floorTables(gs []floorGroup, rounds int) string {
	var b strings.Builder
	for i, g := range gs {
		if i > 0 {
			b.WriteString("\n")
		}
		base := g.base()
		baseLabel := "its base"
		if base != nil {
			baseLabel = base.lib.Label
		}
		fmt.Fprintf(&b, "%s (medians of %s; ratios to %s):\n\n", g.title, plural(rounds, "round"), baseLabel)
		b.WriteString("| Library | pairs/s ↑ | client CPU µs/pair ↓ | server CPU µs/pair ↓ |\n|:---|---:|---:|---:|\n")
		for _, r := range g.rows {
			b.WriteString("| " + r.lib.Label + " |")
			m, ok := r.medians()
			if !ok {
				b.WriteString(" error | error | error |\n")
				continue
			}
			var q floorSample
			qOK := false
			if base != nil {
				q, qOK = r.ratios(base)
			}
			for _, f := range []struct {
				v, q   float64
				format func(float64) string
			}{{m.rate, q.rate, integer}, {m.client, q.client, small}, {m.server, q.server, small}} {
				b.WriteString(" " + f.format(f.v))
				if qOK && !math.IsNaN(f.q) {
					b.WriteString(" (" + ratio(f.q, 1) + ")")
				}
				if len(r.samples) < rounds {
					fmt.Fprintf(&b, " ‡%d", len(r.samples))
				}
				b.WriteString(" |")
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// floorReport is the floor scenario's section of the report: its tables, how they were
// measured, the libraries' configurations, and the notes of failed rounds and errors.
func floorReport(gs []floorGroup, e *env, rounds int) string {
	var b strings.Builder
	b.WriteString("The floor: the uncontended lock/unlock pair in this one process, every worker of a library on one " +
		"client shared by all of them (one client per server for Redlock).\n\n")
	b.WriteString(floorTables(gs, rounds))
	fmt.Fprintf(&b, "\nEvery library runs once per round, all of them in turn (each round starts a table one row "+
		"further down, so every library takes every place in the order), %s of %v each; a figure is the "+
		"median over the rounds, and its ratio the median over the rounds of the figure ÷ the base library's in the "+
		"same round (↑ higher is better, ↓ lower is better; ‡n: only n rounds measured, see the notes). Pairs/s counts the pairs whose acquire returned within "+
		"the window. Client CPU is this process's user + system CPU over the window (getrusage RUSAGE_SELF, after a "+
		"GC; connecting, loading scripts and five warm-up pairs per worker, all workers at once, come before it) ÷ pairs: the libraries never "+
		"run at once, and the harness's own loop, the same for all, is in it. Server CPU is redis-server's "+
		"used_cpu_user + used_cpu_sys (INFO cpu) over the window ÷ pairs, summed over the three servers for "+
		"Redlock.\n", plural(rounds, "round"), e.duration)
	b.WriteString("\nConfigurations:\n\n")
	seen := map[string]bool{}
	for _, g := range gs {
		for _, r := range g.rows {
			if !seen[r.lib.Name] {
				seen[r.lib.Name] = true
				fmt.Fprintf(&b, "- %s: %s\n", r.lib.Label, r.lib.Config)
			}
		}
	}
	if line := othersLine(gs); line != "" {
		b.WriteString("\n" + line + "\n")
	}
	b.WriteString("\nServer commands per pair, all rounds (INFO commandstats: a script's or function's own commands " +
		"are counted beside the EVALSHA or FCALL that ran them; a subcommand under its command):\n\n")
	for _, g := range gs {
		for _, r := range g.rows {
			fmt.Fprintf(&b, "- %s, %s: %s\n", r.lib.Label, plural(r.workers, "worker"),
				commandMix(breakdown{cmds: r.cmds, per: float64(r.pairs)}))
		}
	}
	var notes []string
	for _, g := range gs {
		for _, r := range g.rows {
			for _, n := range r.notes {
				notes = append(notes, fmt.Sprintf("- %s, %s, %s", r.lib.Label, plural(r.workers, "worker"), n))
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes:\n\n" + strings.Join(notes, "\n") + "\n")
	}
	return b.String()
}

// othersLine says how busy the machine's other processes kept it during the windows: a figure
// measured beside them is noisy, a 1-worker one most (its pairs wait on the scheduler).
func othersLine(gs []floorGroup) string {
	var xs []float64
	for _, g := range gs {
		for _, r := range g.rows {
			for _, s := range r.samples {
				if s.others >= 0 {
					xs = append(xs, s.others)
				}
			}
		}
	}
	if len(xs) == 0 {
		return ""
	}
	return fmt.Sprintf("Other processes on the machine (its CPU in /proc/stat, less this process's and the servers') "+
		"used %s cores in the median window, %s in the busiest, of %d: a figure measured beside them is noisy, a "+
		"1-worker one most, and its ratios are worth more than its level.", fixed2(median(xs)), fixed2(slices.Max(xs)), runtime.NumCPU())
}

// pickFloor returns the libraries of libs named in list, or all of them when list is empty.
func pickFloor(libs []lockers.Shared, names []string) []lockers.Shared {
	if len(names) == 0 {
		return libs
	}
	return slices.DeleteFunc(slices.Clone(libs), func(l lockers.Shared) bool { return !slices.Contains(names, l.Name) })
}

// plural says n things: "1 round", "3 rounds".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

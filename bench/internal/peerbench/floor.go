package peerbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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

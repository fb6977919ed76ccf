package peerbench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/bench/internal/lockers"
	"github.com/leasehold/leasehold/bench/internal/wire"
)

// env is what every scenario runs against.
type env struct {
	addr     string   // the standalone server
	redlock  []string // the three Redlock servers
	duration time.Duration
	hold     time.Duration
	workers  int
	stats    func(addr string) (serverStats, error) // nil: the backend has none
}

// grace is how long waiters still in Lock when a run ends get to come out before they are
// counted as stranded and cancelled.
const grace = 5 * time.Second

// semaphoreLimit is the Semaphore scenario's limit.
const semaphoreLimit = 4

// result is one scenario's figures for one library.
type result struct {
	cells      map[column]cell
	notes      []string
	breakdowns []breakdown
}

// breakdown is the commands of one measured window, by name, for the notes.
type breakdown struct {
	label string      // what the figures are per
	cmds  wire.Counts // the counts
	per   float64     // what to divide them by
}

// scenario is one measurement, run for each library it applies to.
type scenario struct {
	name    string
	columns []column
	applies func(lockers.Lib) bool
	run     func(ctx context.Context, e *env, l lockers.Lib) (result, error)
}

var scenarios = []scenario{
	{name: "uncontended", columns: []column{colUncontended, colServerCPU, colScript}, applies: always, run: uncontended},
	{name: "contended", columns: []column{colContended, colP50, colP99, colCmds, colOther}, applies: always, run: contended},
	{name: "idle", columns: []column{colIdle, colWake}, applies: always, run: idle},
	{name: "semaphore", columns: []column{colSemaphore}, applies: func(l lockers.Lib) bool { return l.Semaphore != nil }, run: semaphore},
	{name: "redlock", columns: []column{colRedlock}, applies: func(l lockers.Lib) bool { return l.Redlock != nil }, run: redlockScenario},
}

func always(lockers.Lib) bool { return true }

func key(scenario string, l lockers.Lib) string { return "peerbench:" + scenario + ":" + l.Name }

// single runs hammer with one Locker from newLocker and reports its rate in col.
func single(ctx context.Context, e *env, col column, newLocker func() (lockers.Locker, error)) (result, error) {
	h, err := hammerLockers(ctx, e, fleet{n: 1, newLocker: newLocker})
	if err != nil {
		return result{}, err
	}
	r := result{cells: map[column]cell{col: {v: h.rate(), ok: true}}}
	r.addNote(h.fails.note(col.String()))
	return r, nil
}

func (r *result) addNote(n string) {
	if n != "" {
		r.notes = append(r.notes, n)
	}
}

// uncontended is one worker's pairs on a key of its own, and, where the backend reports them,
// what the server spent per pair: its process's CPU, and its scripts' own time per call.
func uncontended(ctx context.Context, e *env, l lockers.Lib) (result, error) {
	var before serverStats
	if e.stats != nil {
		var err error
		if before, err = e.stats(e.addr); err != nil {
			return result{}, err
		}
	}
	h, err := hammerLockers(ctx, e, fleet{n: 1, newLocker: func() (lockers.Locker, error) {
		return l.Mutex(e.addr, key("uncontended", l), nil)
	}})
	if err != nil {
		return result{}, err
	}
	r := result{cells: map[column]cell{colUncontended: {v: h.rate(), ok: true}}}
	r.addNote(h.fails.note(colUncontended.String()))
	if e.stats != nil && h.pairs > 0 {
		after, err := e.stats(e.addr)
		if err != nil {
			return result{}, err
		}
		r.cells[colServerCPU] = cell{v: micros(after.cpu-before.cpu) / float64(h.pairs), ok: true}
		if calls := after.scriptCalls - before.scriptCalls; calls > 0 {
			r.cells[colScript] = cell{v: float64(after.scriptUsec-before.scriptUsec) / float64(calls), ok: true}
		}
	}
	return r, nil
}

func redlockScenario(ctx context.Context, e *env, l lockers.Lib) (result, error) {
	return single(ctx, e, colRedlock, func() (lockers.Locker, error) { return l.Redlock(e.redlock, key("redlock", l), nil) })
}

func contended(ctx context.Context, e *env, l lockers.Lib) (result, error) {
	c := wire.NewCounter()
	h, err := hammerLockers(ctx, e, fleet{n: e.workers, counter: c,
		newLocker: func() (lockers.Locker, error) { return l.Mutex(e.addr, key("contended", l), c) }})
	if err != nil {
		return result{}, err
	}
	r := result{cells: map[column]cell{
		colContended: {v: h.rate(), ok: true},
		colCmds:      {v: float64(h.cmds.Total()) / float64(h.pairs), ok: true},
		colOther:     {v: 100 * float64(h.other) / float64(h.pairs), ok: true},
	}, breakdowns: []breakdown{{label: "per handoff, " + colContended.String(), cmds: h.cmds, per: float64(h.pairs)}}}
	if len(h.lat) > 0 {
		slices.Sort(h.lat)
		r.cells[colP50] = cell{v: micros(h.lat[len(h.lat)/2]), ok: true}
		r.cells[colP99] = cell{v: micros(h.lat[len(h.lat)*99/100]), ok: true}
	}
	r.addNote(h.fails.note(colContended.String()))
	if h.stranded > 0 {
		r.strand(fmt.Sprintf("%s: %d of %d workers were still waiting %v after the run ended, the lock free; cancelled then",
			colContended, h.stranded, e.workers, grace), colContended, colP50, colP99, colCmds, colOther)
	}
	return r, nil
}

func semaphore(ctx context.Context, e *env, l lockers.Lib) (result, error) {
	h, err := hammerLockers(ctx, e, fleet{n: e.workers, newLocker: func() (lockers.Locker, error) {
		return l.Semaphore(e.addr, key("semaphore", l), semaphoreLimit, nil)
	}})
	if err != nil {
		return result{}, err
	}
	r := result{cells: map[column]cell{colSemaphore: {v: h.rate(), ok: true}}}
	r.addNote(h.fails.note(colSemaphore.String()))
	if h.stranded > 0 {
		r.strand(fmt.Sprintf("%s: %d of %d workers were still waiting %v after the run ended; cancelled then",
			colSemaphore, h.stranded, e.workers, grace), colSemaphore)
	}
	return r, nil
}

// idle has one Locker hold the lock for e.hold while the others wait, each on its own client,
// and counts the commands sent in a window of up to a second in the middle of the hold. Then
// the holder releases and each waiter takes the lock once and releases it.
func idle(ctx context.Context, e *env, l lockers.Lib) (result, error) {
	c := wire.NewCounter()
	ls, err := open(1+e.workers, func() (lockers.Locker, error) { return l.Mutex(e.addr, key("idle", l), c) })
	if err != nil {
		return result{}, err
	}
	defer closeAll(ls)
	if err := warm(ctx, ls); err != nil {
		return result{}, err
	}
	start := time.Now()
	release, err := ls[0].Lock(ctx)
	if err != nil {
		return result{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg         sync.WaitGroup
		running    atomic.Int64
		fails      failures
		releasedAt atomic.Int64 // when the holder began its release
		firstWake  atomic.Int64 // when the first waiter's Lock returned after it
	)
	for _, w := range ls[1:] {
		running.Add(1)
		wg.Go(func() {
			defer running.Add(-1)
			for {
				unlock, err := w.Lock(runCtx)
				if err == nil {
					if r := releasedAt.Load(); r != 0 {
						firstWake.CompareAndSwap(0, time.Now().UnixNano())
					}
					if err := unlock(); err != nil {
						fails.add(err)
					}
					return
				}
				if runCtx.Err() != nil {
					return
				}
				fails.add(err)
			}
		})
	}
	window := min(time.Second, e.hold/2)
	sleep(ctx, (e.hold-window)/2)
	before, t0 := c.Snapshot(), time.Now()
	sleep(ctx, window)
	cmds, t1 := c.Snapshot().Since(before), time.Now()
	sleep(ctx, e.hold-time.Since(start))
	releasedAt.Store(time.Now().UnixNano())
	if err := release(); err != nil {
		fails.add(err)
	}
	stranded := cancelStragglers(&wg, &running, cancel)
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	r := result{cells: map[column]cell{colIdle: {v: float64(cmds.Total()) / t1.Sub(t0).Seconds(), ok: true}},
		breakdowns: []breakdown{{label: "per second, " + colIdle.String(), cmds: cmds, per: t1.Sub(t0).Seconds()}}}
	if w := firstWake.Load(); w != 0 {
		r.cells[colWake] = cell{v: micros(time.Duration(w - releasedAt.Load())), ok: true}
	}
	r.addNote(fails.note(colIdle.String()))
	if stranded > 0 {
		r.strand(fmt.Sprintf("%s: %d of %d waiters were still waiting %v after the holder released; cancelled then",
			colIdle, stranded, e.workers, grace), colIdle)
	}
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// strand marks cols as measured with waiters stranded: shown, flagged, and left out of the best
// peer.
func (r *result) strand(note string, cols ...column) {
	r.notes = append(r.notes, note)
	for _, col := range cols {
		if c, ok := r.cells[col]; ok {
			c.stranded = true
			r.cells[col] = c
		}
	}
}

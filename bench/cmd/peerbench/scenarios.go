package main

import (
	"context"
	"errors"
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
	{name: "uncontended", columns: []column{colUncontended}, applies: always, run: uncontended},
	{name: "contended", columns: []column{colContended, colP50, colP99, colCmds, colOther}, applies: always, run: contended},
	{name: "idle", columns: []column{colIdle}, applies: always, run: idle},
	{name: "semaphore", columns: []column{colSemaphore}, applies: func(l lockers.Lib) bool { return l.Semaphore != nil }, run: semaphore},
	{name: "redlock", columns: []column{colRedlock}, applies: func(l lockers.Lib) bool { return l.Redlock != nil }, run: redlockScenario},
}

func always(lockers.Lib) bool { return true }

func key(scenario string, l lockers.Lib) string { return "peerbench:" + scenario + ":" + l.Name }

// open makes n Lockers with newLocker, closing those made if one fails.
func open(n int, newLocker func() (lockers.Locker, error)) ([]lockers.Locker, error) {
	var ls []lockers.Locker
	for range n {
		l, err := newLocker()
		if err != nil {
			closeAll(ls)
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

func closeAll(ls []lockers.Locker) {
	for _, l := range ls {
		l.Close()
	}
}

// warm takes and releases the lock once with each Locker in turn, so connections are open and
// scripts loaded before anything is measured.
func warm(ctx context.Context, ls []lockers.Locker) error {
	for _, l := range ls {
		ctx, cancel := context.WithCancel(ctx)
		t := time.AfterFunc(10*time.Second, cancel)
		unlock, err := l.Lock(ctx)
		t.Stop()
		if err == nil {
			err = unlock()
		}
		cancel()
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

// failures counts acquires and releases that returned an error other than the run ending, and
// keeps the first.
type failures struct {
	n     atomic.Int64
	mu    sync.Mutex
	first error
}

func (f *failures) add(err error) {
	if f.n.Add(1) == 1 {
		f.mu.Lock()
		f.first = err
		f.mu.Unlock()
	}
}

func (f *failures) note(what string) string {
	n := f.n.Load()
	if n == 0 {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("%s: %d acquires or releases returned an error and the worker went on (first: %v)", what, n, f.first)
}

// hammered is what hammer measured.
type hammered struct {
	pairs    int64
	elapsed  time.Duration
	lat      []time.Duration // from the start of a release to the return of another worker's acquire
	other    int64           // grants to a worker other than the previous holder
	fails    failures
	stranded int64 // workers still waiting when the grace after the run ran out
	cmds     wire.Counts
}

// hammer has each Locker take and release the lock in a loop, all at once, for d. It counts the
// pairs whose acquire returned within d and times each handoff, from the moment the holder
// starts its release to the moment another worker's acquire returns. When d is up
// the workers finish the acquire they are in and stop; any still waiting after grace are
// counted as stranded and cancelled. Commands sent through c are counted over d.
func hammer(ctx context.Context, ls []lockers.Locker, d time.Duration, c *wire.Counter) *hammered {
	h := &hammered{}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		stop       atomic.Bool
		releasedAt atomic.Int64
		last       atomic.Int64
		pairs      atomic.Int64
		other      atomic.Int64
		running    atomic.Int64
		mu         sync.Mutex
		wg         sync.WaitGroup
		end        time.Time
	)
	begin := make(chan struct{})
	for i, l := range ls {
		id := int64(i + 1)
		running.Add(1)
		wg.Go(func() {
			defer running.Add(-1)
			<-begin
			for !stop.Load() {
				unlock, err := l.Lock(runCtx)
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					h.fails.add(err)
					continue
				}
				if now := time.Now(); now.Before(end) {
					pairs.Add(1)
					// A handoff is a grant to another worker: a worker taking the lock straight
					// back after its own release hands nothing over, and is not timed.
					if prev := last.Load(); prev != 0 && prev != id {
						other.Add(1)
						if r := releasedAt.Load(); r != 0 {
							mu.Lock()
							h.lat = append(h.lat, time.Duration(now.UnixNano()-r))
							mu.Unlock()
						}
					}
				}
				last.Store(id)
				releasedAt.Store(time.Now().UnixNano())
				if err := unlock(); err != nil {
					h.fails.add(err)
				}
			}
		})
	}
	before := c.Snapshot()
	start := time.Now()
	end = start.Add(d)
	close(begin)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	h.cmds = c.Snapshot().Since(before)
	h.elapsed = time.Since(start)
	stop.Store(true)
	h.stranded = cancelStragglers(&wg, &running, cancel)
	h.pairs, h.other = pairs.Load(), other.Load()
	return h
}

// cancelStragglers waits up to grace for the workers in wg to end. If some have not, it counts
// them (running), cancels them, and waits for them; it returns how many were still running.
func cancelStragglers(wg *sync.WaitGroup, running *atomic.Int64, cancel context.CancelFunc) int64 {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return 0
	case <-t.C:
	}
	stranded := running.Load()
	cancel()
	<-done
	return stranded
}

func (h *hammered) rate() float64 { return float64(h.pairs) / h.elapsed.Seconds() }

// check turns a run with no pairs at all into an error.
func (h *hammered) check() error {
	if h.pairs > 0 {
		return nil
	}
	if h.fails.n.Load() > 0 {
		return fmt.Errorf("no acquire succeeded: %v", h.fails.first)
	}
	return errors.New("no acquire succeeded")
}

// hammerLockers opens n Lockers with newLocker, warms them up, hammers them for e.duration
// (counting the commands sent through c, when not nil) and closes them. It returns what hammer
// measured, or an error if a Locker could not be made or warmed, or no pair succeeded.
func hammerLockers(ctx context.Context, e *env, n int, newLocker func() (lockers.Locker, error), c *wire.Counter) (*hammered, error) {
	ls, err := open(n, newLocker)
	if err != nil {
		return nil, err
	}
	defer closeAll(ls)
	if err := warm(ctx, ls); err != nil {
		return nil, err
	}
	h := hammer(ctx, ls, e.duration, c)
	if err := h.check(); err != nil {
		return nil, err
	}
	return h, nil
}

// single runs hammer with one Locker from newLocker and reports its rate in col.
func single(ctx context.Context, e *env, col column, newLocker func() (lockers.Locker, error)) (result, error) {
	h, err := hammerLockers(ctx, e, 1, newLocker, nil)
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

func uncontended(ctx context.Context, e *env, l lockers.Lib) (result, error) {
	return single(ctx, e, colUncontended, func() (lockers.Locker, error) { return l.Mutex(e.addr, key("uncontended", l), nil) })
}

func redlockScenario(ctx context.Context, e *env, l lockers.Lib) (result, error) {
	return single(ctx, e, colRedlock, func() (lockers.Locker, error) { return l.Redlock(e.redlock, key("redlock", l), nil) })
}

func contended(ctx context.Context, e *env, l lockers.Lib) (result, error) {
	c := wire.NewCounter()
	h, err := hammerLockers(ctx, e, e.workers, func() (lockers.Locker, error) { return l.Mutex(e.addr, key("contended", l), c) }, c)
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
	h, err := hammerLockers(ctx, e, e.workers, func() (lockers.Locker, error) {
		return l.Semaphore(e.addr, key("semaphore", l), semaphoreLimit, nil)
	}, nil)
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
		wg      sync.WaitGroup
		running atomic.Int64
		fails   failures
	)
	for _, w := range ls[1:] {
		running.Add(1)
		wg.Go(func() {
			defer running.Add(-1)
			for {
				unlock, err := w.Lock(runCtx)
				if err == nil {
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
	if err := release(); err != nil {
		fails.add(err)
	}
	stranded := cancelStragglers(&wg, &running, cancel)
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	r := result{cells: map[column]cell{colIdle: {v: float64(cmds.Total()) / t1.Sub(t0).Seconds(), ok: true}},
		breakdowns: []breakdown{{label: "per second, " + colIdle.String(), cmds: cmds, per: t1.Sub(t0).Seconds()}}}
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

package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The keys of the demo's Semaphore and Mutex.
const (
	poolKey = "demo:pool"
	lockKey = "demo:lock"
)

// demoConfig is what the demo's flags set.
type demoConfig struct {
	workers  int           // workers sharing the Semaphore and the Mutex
	limit    int           // permits of the Semaphore
	duration time.Duration // how long the workers keep acquiring; the demo's timings scale with it
	ttl      time.Duration // TTL of the workers' leases, refreshed every ttl/3

	// newStore, when set, makes the store instead of memory.New: tests run the demo over a
	// broken store to see its checks fail.
	newStore func() core.Store
}

// defaultDemoConfig returns the configuration the flags default to.
func defaultDemoConfig() demoConfig {
	return demoConfig{workers: 6, limit: 3, duration: 2500 * time.Millisecond, ttl: time.Second}
}

// validate returns an error naming the first flag whose value is out of range.
func (c demoConfig) validate() error {
	switch {
	case c.workers < 1:
		return fmt.Errorf("-workers %d: must be at least 1", c.workers)
	case c.limit < 1:
		return fmt.Errorf("-limit %d: must be at least 1", c.limit)
	case c.duration <= 0:
		return fmt.Errorf("-duration %v: must be positive", c.duration)
	case c.ttl < primitives.MinTTL:
		return fmt.Errorf("-ttl %v: must be at least %v", c.ttl, primitives.MinTTL)
	}
	return nil
}

// demoHelp is the text of `leasehold demo --help`, before the flags.
const demoHelp = `Usage: leasehold demo [flags]

Runs a few seconds of contention on the in-memory store (no server needed)
and checks Leasehold's guarantees while it does:

  - Workers take 1 or 2 permits of a weighted Semaphore on "demo:pool", work
    a while and release them; now and then one takes the Mutex on "demo:lock"
    for a short critical section. Their leases are refreshed in the background.
  - A fifth of the way in, worker w1 takes a permit with no refresh and a TTL
    of a tenth of the run, then stalls for twice the TTL, as a process in a
    long GC pause would. The lease is reported lost (OnLost, Done, Err), its
    permit goes to the others, and its Release returns an error wrapping
    core.ErrLost. Its fence is older than the ones granted since, which is
    how a resource can refuse its late writes.

Each line shows the time since the start, the worker, the event, the key,
the lease's permits and fencing token, and the key's holders and permits in
use after the event. Fences are printed less the run's first fence (so the
first is 0), short enough to compare by eye; the summary gives the first in
full. Their order is the order of the fences themselves. Lines fit in 100
columns: a long note goes on the lines below its event.

The summary compares the most permits held at once with the limit, counted
twice: by the workers (a counter raised after Acquire and lowered before
Release; the lease let expire is left out, since from its expiry on its
holder ran unprotected, which is the point) and by the store (Inspect right
after each grant). It checks that the Mutex never had two holders and that
each key's fences increased strictly in the order the store granted them.

Exit status: 0 if every check passed, 1 if one failed, 2 for a bad flag,
130 if interrupted.

Flags:
`

// demoCommand runs `leasehold demo args` and returns the exit status.
func demoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := defaultDemoConfig()
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "number of workers sharing the semaphore and the mutex (at least 1)")
	fs.IntVar(&cfg.limit, "limit", cfg.limit, "permits of the semaphore; a worker takes 1 or 2 at a time (at least 1)")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "how long the workers keep acquiring; work times and the expiring lease's TTL\nscale with it (positive)")
	fs.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "TTL of the workers' leases, refreshed every ttl/3 (at least 10ms)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoHelp)
		fs.PrintDefaults()
	}
	if ok, code := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if err := cfg.validate(); err != nil {
		usageError(stderr, "demo", err.Error())
		return exitUsage
	}
	if _, err := runDemo(ctx, stdout, cfg); err != nil {
		fmt.Fprintf(stderr, "leasehold demo: %v\n", err)
		if errors.Is(err, context.Canceled) {
			return exitInterrupted
		}
		return exitFail
	}
	return exitOK
}

// demo is the state of one run. Its methods are safe for concurrent use.
type demo struct {
	cfg       demoConfig
	start     time.Time
	store     *observedStore
	pool      *primitives.Semaphore // the workers' semaphore
	lock      *primitives.Mutex
	stallPool *primitives.Semaphore // the same key as pool: no refresh, a short TTL, OnLost
	stallTTL  time.Duration
	lost      chan error // what OnLost reported for the expiring lease

	poolInUse    gauge // permits held by the workers' refreshed leases on poolKey
	lockHolders  gauge // holders of the mutex
	poolAcquired atomic.Int64
	lockAcquired atomic.Int64

	mu        sync.Mutex // orders the output lines; guards the fields below
	w         io.Writer
	nameWidth int
	shown     map[string]*tally // per key, as the lines tell it
	stalled   bool              // w1 took the lease to let expire
	lostAt    time.Duration     // when OnLost ran, since start
	fence0    uint64            // the first fence printed; fences are printed less it
	leaseLost bool              // and every report of its loss was right
	problems  []string          // failed checks: the demo fails
	notes     []string          // worth knowing, but no failure
	closed    bool              // runDemo has returned: late callbacks print nothing
}

// tally is a key's holders and permits in use, as the printed lines account for them.
type tally struct{ holders, permits int }

// runDemo runs the demo described by cfg, printing to w, and returns what it measured. The error
// is non-nil if cfg is invalid, if a check failed (limit exceeded, two mutex holders, a fence that
// did not increase, a loss not reported), or if ctx ended first (then it wraps ctx's error).
// Every goroutine it starts has ended when it returns.
func runDemo(ctx context.Context, w io.Writer, cfg demoConfig) (demoReport, error) {
	if err := cfg.validate(); err != nil {
		return demoReport{}, err
	}
	var base core.Store
	if cfg.newStore != nil {
		base = cfg.newStore()
	} else {
		base = memory.New()
	}
	d := &demo{
		cfg:       cfg,
		store:     observe(base),
		stallTTL:  max(cfg.duration/10, primitives.MinTTL),
		lost:      make(chan error, 1),
		w:         w,
		nameWidth: max(len("worker"), len(workerName(cfg.workers))),
		shown:     map[string]*tally{poolKey: {}, lockKey: {}},
	}
	// The end of the run bounds every wait; the acquire timeout only backs it up.
	timeout := primitives.WithAcquireTimeout(cfg.duration + time.Minute)
	var err error
	if d.pool, err = primitives.NewSemaphore(d.store, poolKey, cfg.limit, primitives.WithTTL(cfg.ttl), timeout); err != nil {
		return demoReport{}, err
	}
	if d.lock, err = primitives.NewMutex(d.store, lockKey, primitives.WithTTL(cfg.ttl), timeout); err != nil {
		return demoReport{}, err
	}
	if d.stallPool, err = primitives.NewSemaphore(d.store, poolKey, cfg.limit, timeout,
		primitives.WithTTL(d.stallTTL), primitives.WithoutRefresh(), primitives.WithOnLost(d.onLost)); err != nil {
		return demoReport{}, err
	}

	d.paragraph(fmt.Sprintf("%d workers share semaphore %q (limit %d) and mutex %q in memory for %v.",
		cfg.workers, poolKey, cfg.limit, lockKey, cfg.duration))
	d.paragraph(fmt.Sprintf("Their leases have TTL %v, refreshed every %v; w1 lets one lease of TTL %v expire. "+
		"Fences are shown less the first one of the run.", cfg.ttl, (cfg.ttl / 3).Round(time.Millisecond), d.stallTTL))
	fmt.Fprintln(w)
	d.printRow(tableRow{at: "time", who: "worker", what: "event", key: "key", permits: "permits", fence: "fence", holders: "holders", inUse: "in use"})
	d.start = time.Now()

	workCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	for id := 1; id <= cfg.workers; id++ {
		wg.Go(func() { d.worker(workCtx, ctx, id) })
	}
	wg.Wait()

	rep := d.summary(ctx.Err() != nil)
	switch {
	case len(rep.problems) == 1:
		return rep, fmt.Errorf("check failed: %s", rep.problems[0])
	case len(rep.problems) > 1:
		return rep, fmt.Errorf("%d checks failed, the first: %s", len(rep.problems), rep.problems[0])
	case ctx.Err() != nil:
		return rep, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return rep, nil
}

// workerName returns the name of worker id, counting from 1.
func workerName(id int) string { return fmt.Sprintf("w%d", id) }

// worker takes permits and now and then the mutex until workCtx ends. Worker 1 starts a fifth of
// the way into the run with the lease it lets expire, stalling past its TTL (unless runCtx ends).
func (d *demo) worker(workCtx, runCtx context.Context, id int) {
	name := workerName(id)
	if id == 1 {
		sleep(workCtx, nil, d.cfg.duration/5)
		d.stall(workCtx, runCtx, name)
	}
	for workCtx.Err() == nil {
		n := 1 + rand.IntN(min(2, d.cfg.limit))
		d.hold(workCtx, name, job{
			acquire:  func(ctx context.Context) (core.Lease, error) { return d.pool.Acquire(ctx, n) },
			held:     &d.poolInUse,
			acquired: &d.poolAcquired,
			work:     between(d.cfg.duration/12, d.cfg.duration/6),
		})
		if rand.IntN(3) == 0 {
			d.hold(workCtx, name, job{acquire: d.lock.Acquire, held: &d.lockHolders, acquired: &d.lockAcquired, work: d.cfg.duration / 50})
		}
		sleep(workCtx, nil, between(0, d.cfg.duration/40))
	}
}

// job is one turn of a worker on a key: how it acquires, where the lease is counted while held
// and once acquired, and how long it works under the lease.
type job struct {
	acquire  func(context.Context) (core.Lease, error)
	held     *gauge
	acquired *atomic.Int64
	work     time.Duration
}

// hold acquires a lease, counts it in j.held, works under it for j.work (less if ctx ends or the
// lease is lost), and releases it. An acquire that fails before ctx ends is a failed check; a
// lease lost although it was refreshed is noted.
func (d *demo) hold(ctx context.Context, name string, j job) {
	held, acquired := j.held, j.acquired
	l, err := j.acquire(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.problem("%s: %v", name, err)
		}
		return
	}
	held.add(l.Permits())
	acquired.Add(1)
	d.event(l, happening{who: name, what: "acquired", delta: 1})
	lost := sleep(ctx, l.Done(), j.work)
	held.add(-l.Permits())
	if lost {
		d.event(l, happening{who: name, what: "LOST", delta: -1, note: l.Err().Error()})
	} else {
		d.event(l, happening{who: name, what: "released", delta: -1})
	}
	err = l.Release(context.WithoutCancel(ctx))
	switch {
	case errors.Is(err, core.ErrLost):
		d.note("%s lost a refreshed lease on %q (fence %d); a TTL of %v may be too short for this machine: %v",
			name, l.Key(), l.Fence(), d.cfg.ttl, err)
	case err != nil:
		d.problem("%s: %v", name, err)
	}
}

// sleep waits for d, or until ctx ends or lost is closed; it reports whether lost was closed
// first. A nil lost is never closed.
func sleep(ctx context.Context, lost <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-lost:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// between returns a random duration in [lo, hi]; lo <= hi.
func between(lo, hi time.Duration) time.Duration {
	return lo + rand.N(hi-lo+1)
}

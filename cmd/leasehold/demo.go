package main

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

// demoConfig is what the demo's flags set.
type demoConfig struct {
	workers  int
	limit    int
	duration time.Duration
	ttl      time.Duration
	seed     uint64
}

const (
	semKey = "demo:gpu-pool"
	muKey  = "demo:report"
)

func runDemoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := demoConfig{}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.IntVar(&cfg.workers, "workers", 6, "number of workers sharing the semaphore and the mutex (>= 1)")
	fs.IntVar(&cfg.limit, "limit", 3, "permits of the semaphore (>= 2: workers take 1 or 2 at once)")
	fs.DurationVar(&cfg.duration, "duration", 2*time.Second, "how long the workers run (> 0)")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "lease TTL for the workers; leases are refreshed every TTL/3 (>= 10ms)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed for the workers' random work times")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: leasehold demo [flags]

Runs workers on the embedded in-memory store. Each worker repeatedly takes 1 or 2 permits of a
weighted Semaphore, works, and now and then takes a Mutex for a short critical section. Every line
shows who acquired or released what, with the fencing token of the grant. One extra worker takes a
permit without refresh and stalls past its TTL, as a long GC pause would: its lease is reported
lost, its permit goes to the others, and its Release says the critical section ran unprotected.
The demo ends with the maximum of simultaneous holders against the limit, and exits 1 if the limit
was ever exceeded or a fence went backwards.

Flags:
`)
		fs.PrintDefaults()
	}
	if ok, code := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintf(stderr, "leasehold demo: %v (run 'leasehold demo --help')\n", err)
		return exitUsage
	}
	if err := runDemo(ctx, stdout, cfg); err != nil {
		fmt.Fprintf(stderr, "leasehold demo: %v\n", err)
		return exitFail
	}
	return exitOK
}

func (c demoConfig) check() error {
	switch {
	case c.workers < 1:
		return fmt.Errorf("-workers %d: must be >= 1", c.workers)
	case c.limit < 2:
		return fmt.Errorf("-limit %d: must be >= 2", c.limit)
	case c.duration <= 0:
		return fmt.Errorf("-duration %v: must be > 0", c.duration)
	case c.ttl < 10*time.Millisecond:
		return fmt.Errorf("-ttl %v: must be >= 10ms", c.ttl)
	}
	return nil
}

// demo is the shared state of one run.
type demo struct {
	cfg   demoConfig
	start time.Time
	store *memory.Store
	sem   *primitives.Semaphore
	mu    *primitives.Mutex

	out     sync.Mutex // serialises lines and guards the fields below
	w       io.Writer
	inUse   int
	peak    int
	muIn    int
	muPeak  int
	muLast  uint64
	fenceOK bool
	grants  map[string]int
	issues  []string

	storePeak atomic.Int64
}

// runDemo runs the demo and returns an error if the run found a violation or could not run.
// Every goroutine it starts has ended when it returns.
func runDemo(ctx context.Context, w io.Writer, cfg demoConfig) error {
	d := &demo{cfg: cfg, start: time.Now(), store: memory.New(), w: w, fenceOK: true, grants: map[string]int{}}
	var err error
	if d.sem, err = primitives.NewSemaphore(d.store, semKey, cfg.limit, primitives.WithTTL(cfg.ttl)); err != nil {
		return err
	}
	if d.mu, err = primitives.NewMutex(d.store, muKey, primitives.WithTTL(cfg.ttl)); err != nil {
		return err
	}
	fmt.Fprintf(w, "leasehold demo: %d workers share semaphore %q (limit %d) and mutex %q on the in-memory store\n\n",
		cfg.workers, semKey, cfg.limit, muKey)

	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { d.monitor(ctx) })
	lost := make(chan string, 1)
	wg.Go(func() { lost <- d.staller(ctx) })
	for i := range cfg.workers {
		wg.Go(func() { d.worker(ctx, i) })
	}
	wg.Wait()
	return d.summary(<-lost)
}

// line prints one event; the caller holds d.out.
func (d *demo) line(who, what, key string, permits int, fence uint64, note string) {
	fmt.Fprintf(d.w, "%+8.3fs  %-9s  %-9s %-14s %d permit(s)  fence %d  %s\n",
		time.Since(d.start).Seconds(), who, what, key, permits, fence, note)
}

func (d *demo) problem(format string, args ...any) {
	d.issues = append(d.issues, fmt.Sprintf(format, args...))
}

// worker takes 1 or 2 permits, works, sometimes takes the mutex, and releases, until ctx ends.
func (d *demo) worker(ctx context.Context, i int) {
	name := fmt.Sprintf("worker-%d", i+1)
	rnd := rand.New(rand.NewPCG(d.cfg.seed, uint64(i)))
	for round := 0; ctx.Err() == nil; round++ {
		n := 1 + rnd.IntN(2)
		l, err := d.sem.Acquire(ctx, n)
		if err != nil {
			if ctx.Err() == nil {
				d.out.Lock()
				d.problem("%s: acquire: %v", name, err)
				d.out.Unlock()
			}
			return
		}
		d.out.Lock()
		d.inUse += n
		d.peak = max(d.peak, d.inUse)
		d.grants[semKey]++
		if d.inUse > d.cfg.limit {
			d.problem("%d permits held at once, limit %d", d.inUse, d.cfg.limit)
		}
		d.line(name, "acquired", semKey, n, l.Fence(), fmt.Sprintf("workers hold %d/%d", d.inUse, d.cfg.limit))
		d.out.Unlock()

		sleep(ctx, time.Duration(20+rnd.IntN(100))*time.Millisecond)
		if round%2 == 1 {
			d.critical(ctx, name)
		}

		d.out.Lock()
		d.inUse -= n
		d.line(name, "released", semKey, n, l.Fence(), fmt.Sprintf("workers hold %d/%d", d.inUse, d.cfg.limit))
		d.out.Unlock()
		if err := l.Release(context.WithoutCancel(ctx)); err != nil {
			d.out.Lock()
			d.problem("%s: release: %v", name, err)
			d.out.Unlock()
		}
		sleep(ctx, time.Duration(rnd.IntN(30))*time.Millisecond)
	}
}

// critical holds the mutex for a moment and checks that nobody else does and that its fence is
// above the previous holder's.
func (d *demo) critical(ctx context.Context, name string) {
	l, err := d.mu.Acquire(ctx)
	if err != nil {
		return // ctx ended
	}
	d.out.Lock()
	d.muIn++
	d.muPeak = max(d.muPeak, d.muIn)
	d.grants[muKey]++
	if l.Fence() <= d.muLast {
		d.fenceOK = false
		d.problem("mutex fence %d is not above the previous holder's %d", l.Fence(), d.muLast)
	}
	d.muLast = l.Fence()
	d.line(name, "locked", muKey, 1, l.Fence(), "writes the report, passing its fence along")
	d.out.Unlock()
	sleep(ctx, 15*time.Millisecond)
	d.out.Lock()
	d.muIn--
	d.line(name, "unlocked", muKey, 1, l.Fence(), "")
	d.out.Unlock()
	if err := l.Release(context.WithoutCancel(ctx)); err != nil {
		d.out.Lock()
		d.problem("%s: mutex release: %v", name, err)
		d.out.Unlock()
	}
}

// staller takes a permit without refresh and stalls past its TTL, as a long pause would. It
// returns a description of what happened, for the summary.
func (d *demo) staller(ctx context.Context) string {
	const name = "stalled"
	ttl := min(d.cfg.duration/4, 400*time.Millisecond)
	ttl = max(ttl, 10*time.Millisecond)
	lostAt := make(chan time.Duration, 1)
	sem, err := primitives.NewSemaphore(d.store, semKey, d.cfg.limit, primitives.WithTTL(ttl), primitives.WithoutRefresh(),
		primitives.WithOnLost(func(l core.Lease, err error) {
			at := time.Since(d.start)
			d.out.Lock()
			d.line(name, "LOST", semKey, l.Permits(), l.Fence(), "expired while stalled; its permit is free for others")
			d.out.Unlock()
			lostAt <- at
		}))
	if err != nil {
		return err.Error()
	}
	l, err := sem.Acquire(ctx, 1)
	if err != nil {
		return "the stalled worker got no permit: " + err.Error()
	}
	d.out.Lock()
	d.line(name, "acquired", semKey, 1, l.Fence(), fmt.Sprintf("no refresh, TTL %v, then stalls for %v", ttl, 2*ttl))
	d.out.Unlock()
	sleep(context.WithoutCancel(ctx), 2*ttl) // the stall ignores ctx, as a GC pause would
	err = l.Release(context.WithoutCancel(ctx))
	var at time.Duration
	select {
	case at = <-lostAt:
	case <-time.After(time.Second):
		return "the stalled lease's loss was never reported to OnLost"
	}
	d.out.Lock()
	d.line(name, "woke", semKey, 1, l.Fence(), "and released: "+errString(err))
	d.out.Unlock()
	if !errors.Is(err, core.ErrLost) {
		d.out.Lock()
		d.problem("the stalled lease's Release returned %v, want an error wrapping ErrLost", err)
		d.out.Unlock()
	}
	return fmt.Sprintf("lease with TTL %v lost at %+.3fs; its Release said %q", ttl, at.Seconds(), errString(err))
}

// monitor samples the store's own view of the semaphore until ctx ends.
func (d *demo) monitor(ctx context.Context) {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		if snap, err := d.store.Inspect(context.WithoutCancel(ctx), semKey); err == nil {
			for n := int64(snap.InUse()); n > d.storePeak.Load(); {
				d.storePeak.Store(n) // only this goroutine writes
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *demo) summary(stalled string) error {
	d.out.Lock()
	defer d.out.Unlock()
	fmt.Fprintf(d.w, "\nsummary after %.1fs\n", time.Since(d.start).Seconds())
	fmt.Fprintf(d.w, "  semaphore %-14s limit %d: at most %d permits held at once by the workers, %d by the store's count; %d grants\n",
		semKey, d.cfg.limit, d.peak, d.storePeak.Load(), d.grants[semKey])
	fmt.Fprintf(d.w, "  mutex     %-14s at most %d holder at once; %d grants, fences strictly increasing: %v\n",
		muKey, d.muPeak, d.grants[muKey], d.fenceOK)
	fmt.Fprintf(d.w, "  stalled   %s\n", stalled)
	if int(d.storePeak.Load()) > d.cfg.limit {
		d.problem("the store counted %d permits in use, limit %d", d.storePeak.Load(), d.cfg.limit)
	}
	if d.muPeak > 1 {
		d.problem("%d mutex holders at once", d.muPeak)
	}
	if len(d.issues) > 0 {
		for _, p := range d.issues {
			fmt.Fprintf(d.w, "  VIOLATION: %s\n", p)
		}
		return fmt.Errorf("%d violation(s)", len(d.issues))
	}
	fmt.Fprintf(d.w, "  OK: the limit held and no fence went backwards\n")
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

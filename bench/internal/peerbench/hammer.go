package peerbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/bench/internal/lockers"
	"github.com/leasehold/leasehold/bench/internal/wire"
)

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
// counted as stranded and cancelled. Commands sent through c are counted over d, and m (when
// not nil) reads its gauges at the start of d and at its end.
func hammer(ctx context.Context, ls []lockers.Locker, d time.Duration, c *wire.Counter, m *meter) *hammered {
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
	m.start()
	start := time.Now()
	end = start.Add(d)
	close(begin)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	h.elapsed = time.Since(start)
	m.stop()
	h.cmds = c.Snapshot().Since(before)
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

// fleet is the Lockers a scenario hammers: n of them, each made by newLocker, their commands
// counted through counter when it is not nil.
type fleet struct {
	n         int
	newLocker func() (lockers.Locker, error)
	counter   *wire.Counter
}

// hammerLockers opens f's Lockers, warms them up, hammers them for e.duration and closes them. It
// returns what hammer measured, or an error if a Locker could not be made or warmed, or no pair
// succeeded.
func hammerLockers(ctx context.Context, e *env, f fleet) (*hammered, error) {
	n, newLocker, c := f.n, f.newLocker, f.counter
	ls, err := open(n, newLocker)
	if err != nil {
		return nil, err
	}
	defer closeAll(ls)
	if err := warm(ctx, ls); err != nil {
		return nil, err
	}
	h := hammer(ctx, ls, e.duration, c, nil)
	if err := h.check(); err != nil {
		return nil, err
	}
	return h, nil
}

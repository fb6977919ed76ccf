package primitives

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

type leaseParams struct {
	ctx    context.Context // the acquire's, without its cancellation, for events; nil without event handlers
	store  Store
	key    string
	holder string
	// own says holder was drawn for this lease alone: no other lease, now or later, has it.
	own     bool
	permits int
	fence   uint64
	value   string
	start   time.Time // when the grant or refresh was sent
	cfg     *config
}

// lease is the Lease the primitives return. One timer drives it: it fires at the next
// refresh or at the deadline, whichever comes first. A refresh runs on the timer's goroutine, so
// a lease costs no goroutine between refreshes, and none at all once it ends; Release waits for
// a refresh in flight, so nothing of the lease outlives it.
type lease struct {
	p   leaseParams
	req core.ExtendRequest

	// running counts refreshes in flight and the release after a loss at the deadline; Add
	// happens under mu only while !released, so never during Release's Wait.
	running sync.WaitGroup
	// extending, a semaphore of one, serialises the lease's Extend calls to the store
	// (background refresh and Lease.Extend). A call holds it until it has applied its reply, so
	// the deadline is always that of the last call to reach the store. Lock order: extending,
	// then mu. A channel, so that waiting for it can end with ctx; made, under mu, by the first
	// call.
	extending chan struct{}

	mu          sync.Mutex
	done        chan struct{} // made by the first Done, under mu; closed when the lease ends
	timer       *time.Timer
	deadline    time.Time
	nextRefresh time.Time
	cancel      context.CancelFunc // aborts the refresh in flight, if any
	refreshing  bool               // a refresh is in flight; it resets the timer when done
	stopped     bool               // no more refreshes
	ended       bool               // the lease ended: done, if made, is closed
	released    bool               // Release was called
	// unsure says a Release failed whose call may have reached the store (its reply lost, ctx
	// ended on the way), called before the deadline: a later Release that finds nothing held
	// may find that release's work, and the critical section ended while the lease held.
	unsure bool
	// lost says why the lease was lost, wrapping ErrLost, with no operation or key: each
	// later call adds its own. err, what Err reports, is lost with the operation that found the
	// loss and the key.
	lost error
	err  error
	// failures counts the background refreshes failed since the last one that succeeded;
	// lastFailure is the error of the latest.
	failures    int
	lastFailure error
}

var _ Lease = (*lease)(nil)

// event reports what happened to the lease to the configured event handlers, in the context of
// the lease's acquire.
func (l *lease) event(kind EventKind, err error) { l.eventCtx(l.p.ctx, kind, err) }

// eventCtx reports what happened to the lease in the context ctx of a call.
func (l *lease) eventCtx(ctx context.Context, kind EventKind, err error) {
	if len(l.p.cfg.events) == 0 {
		return
	}
	e := Event{Kind: kind, Key: l.p.key, Holder: l.p.holder, Permits: l.p.permits, Fence: l.p.fence, Err: err, Lease: l, Context: ctx}
	if kind == EventReleased || kind == EventLost {
		e.Held = time.Since(l.p.start)
	}
	l.p.cfg.emit(e)
}

// newLease returns the lease p describes; its timer starts with arm, which must be called
// before the lease is returned to anyone.
func newLease(p leaseParams) *lease {
	return &lease{
		p:           p,
		req:         core.ExtendRequest{Key: p.key, Holder: p.holder, TTL: p.cfg.ttl},
		deadline:    p.start.Add(p.cfg.ttl - drift(p.cfg.ttl)),
		nextRefresh: p.start.Add(p.cfg.refreshInterval),
		stopped:     p.cfg.noRefresh,
	}
}

// stopAtLocked returns when the lease is reported lost unless a refresh renewed it by then: the
// stop margin before its deadline. l.mu must be held.
func (l *lease) stopAtLocked() time.Time { return l.deadline.Add(-l.p.cfg.stopMargin) }

// arm starts the lease's timer: its refreshes and its deadline.
func (l *lease) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(l.nextWakeLocked(time.Now()), l.tick)
}

// nextWakeLocked returns how long until the timer should next fire. l.mu must be held.
func (l *lease) nextWakeLocked(now time.Time) time.Duration {
	at := l.stopAtLocked()
	if !l.stopped && l.nextRefresh.Before(at) {
		at = l.nextRefresh
	}
	return at.Sub(now)
}

func (l *lease) Key() string    { return l.p.key }
func (l *lease) Holder() string { return l.p.holder }
func (l *lease) Permits() int   { return l.p.permits }
func (l *lease) Fence() uint64  { return l.p.fence }
func (l *lease) Value() string  { return l.p.value }

func (l *lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *lease) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		if l.ended {
			return closedChan
		}
		l.done = make(chan struct{})
	}
	return l.done
}

// closedChan is the Done of a lease that ended before anyone asked for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// extendingLocked returns l.extending, making it the first time. l.mu must be held.
func (l *lease) extendingLocked() chan struct{} {
	if l.extending == nil {
		l.extending = make(chan struct{}, 1)
	}
	return l.extending
}

func (l *lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *lease) StopRefresh() {
	l.mu.Lock()
	l.stopLocked()
	l.mu.Unlock()
}

// stopLocked ends refreshing and aborts a refresh in flight; the timer then fires only at the
// deadline. l.mu must be held.
func (l *lease) stopLocked() {
	l.stopped = true
	if l.cancel != nil {
		l.cancel()
	}
}

// endLocked ends the lease and closes done, once. l.mu must be held.
func (l *lease) endLocked() {
	if !l.ended {
		l.ended = true
		l.stopLocked()
		l.timer.Stop()
		if l.done != nil {
			close(l.done)
		}
	}
}

func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	inTime := time.Now().Before(l.deadline) // the critical section ended while the lease held
	l.stopLocked()
	l.timer.Stop()
	l.mu.Unlock()
	l.running.Wait() // no refresh may race the release

	l.mu.Lock()
	if lost := l.lost; lost != nil && !l.p.own {
		// Lost under a holder id shared with other leases (WithHolder, Adopt): the store may
		// have granted that id again since, the same lease and fence while it still held this
		// one, and a release would end that grant. Left to the store's expiry.
		l.endLocked()
		l.mu.Unlock()
		return fmt.Errorf("leasehold: release %s: %w", quoteKey(l.p.key), lost)
	}
	l.mu.Unlock()
	held, err := l.p.store.Release(ctx, core.ReleaseRequest{Key: l.p.key, Holder: l.p.holder, Fence: l.p.fence})

	closed := err != nil && errors.Is(err, ErrClosed)
	l.mu.Lock()
	if err != nil && !closed && l.err == nil && !l.ended {
		// Not released: the lease stays, unrefreshed, until its deadline; Release may be retried.
		l.released, l.unsure = false, l.unsure || inTime
		l.timer.Reset(l.nextWakeLocked(time.Now()))
		l.mu.Unlock()
		err = fmt.Errorf("leasehold: release %s: %w", quoteKey(l.p.key), err)
		l.eventCtx(ctx, EventReleaseFailed, err)
		return err
	}
	l.endLocked()
	wasLost := l.lost
	switch {
	case wasLost != nil:
	case closed:
		// Neither released nor ever to be refreshed: lost, now. The backend may keep it until
		// it expires.
		l.setLostLocked("release", err)
	case err == nil && !held && l.unsure:
		// An earlier Release, sent while the lease was held, may have ended it and lost its
		// reply: the critical section ended then, protected. Released, not lost.
	case err == nil && !held:
		l.setLostLocked("release", errors.New("the store no longer held it (expired or taken)"))
	}
	lostNow := l.err
	l.mu.Unlock()
	switch {
	case wasLost != nil:
		return fmt.Errorf("leasehold: release %s: %w", quoteKey(l.p.key), wasLost)
	case err != nil && !closed:
		// The store may still hold the lease; it expires by its TTL.
		return fmt.Errorf("leasehold: release %s: %w", quoteKey(l.p.key), err)
	case lostNow != nil:
		l.eventCtx(ctx, EventLost, lostNow)
		if f := l.p.cfg.onLost; f != nil {
			go f(l, lostNow)
		}
		return lostNow
	}
	l.eventCtx(ctx, EventReleased, nil)
	return nil
}

// setLostLocked records that the operation op found the lease lost, for cause (which may wrap
// ErrLost already). l.mu must be held.
func (l *lease) setLostLocked(op string, cause error) {
	l.lost = cause
	if !errors.Is(cause, ErrLost) {
		l.lost = fmt.Errorf("%w: %w", ErrLost, cause)
	}
	l.err = fmt.Errorf("leasehold: %s %s: %w", op, quoteKey(l.p.key), l.lost)
}

// loseLocked ends the lease as lost, found so by the operation op, and returns the OnLost call
// to make, if any, once l.mu is released. l.mu must be held.
func (l *lease) loseLocked(op string, cause error) func() {
	if l.ended || l.released {
		return nil
	}
	l.setLostLocked(op, cause)
	l.endLocked()
	f, err := l.p.cfg.onLost, l.err
	return func() {
		l.event(EventLost, err)
		if f != nil {
			go f(l, err) // on a goroutine of its own, so that the callback may call Release
		}
	}
}

func (l *lease) Held(ctx context.Context) (bool, error) {
	l.mu.Lock()
	ended := l.released || l.ended
	l.mu.Unlock()
	if ended {
		return false, nil
	}
	snap, err := l.p.store.Inspect(ctx, l.p.key)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			l.lose("held", err)
		}
		return false, fmt.Errorf("leasehold: held %s: %w", quoteKey(l.p.key), err)
	}
	for _, info := range snap.Leases {
		if info.Holder == l.p.holder && info.Fence == l.p.fence {
			return l.heldLocally(), nil
		}
	}
	// Gone for certain: a store never revives a lease, so unless Release ended it meanwhile
	// (which lose checks), it is lost now rather than at the next refresh or the deadline.
	l.lose("held", errors.New("the store no longer holds it (expired or taken)"))
	return false, nil
}

// heldLocally reports whether the lease, which the store was just found to hold, is still held
// by the lease's own account: neither released nor lost during the call, and not past its stop
// point. Past it, it is lost now, as the timer about to fire would find, so that Held never says
// true of a lease whose Err is about to wrap ErrLost.
func (l *lease) heldLocally() bool {
	l.mu.Lock()
	if l.released || l.ended {
		l.mu.Unlock()
		return false
	}
	if time.Now().Before(l.stopAtLocked()) {
		l.mu.Unlock()
		return true
	}
	notify, release := l.loseAtStopLocked()
	l.mu.Unlock()
	if notify != nil {
		notify()
	}
	if release != nil {
		go release() // bounded; not on the caller's time
	}
	return false
}

// lose ends the lease as lost, found so by the operation op, unless it has ended or is being
// released, and runs OnLost.
func (l *lease) lose(op string, cause error) {
	l.mu.Lock()
	notify := l.loseLocked(op, cause)
	l.mu.Unlock()
	if notify != nil {
		notify()
	}
}

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
	store   core.Store
	key     string
	holder  string
	permits int
	fence   uint64
	start   time.Time // when the grant or refresh was sent
	cfg     *config
}

// lease is the core.Lease the primitives return. Its refresher goroutine, if any, starts with it
// and ends on Release, loss, or StopRefresh; its expiry timer declares it lost when the deadline
// passes without a successful refresh.
type lease struct {
	p    leaseParams
	done chan struct{}

	// ctx is canceled to abort an in-flight refresh; stop is closed to end the refresher.
	ctx     context.Context
	cancel  context.CancelFunc
	stop    chan struct{}
	running sync.WaitGroup

	mu       sync.Mutex
	deadline time.Time
	expiry   *time.Timer
	stopped  bool // stop is closed
	ended    bool // done is closed
	released bool // Release was called
	err      error
}

var _ core.Lease = (*lease)(nil)

// drift is the allowance for the rate difference between the local clock and the store's.
func drift(ttl time.Duration) time.Duration { return ttl / 100 }

func startLease(p leaseParams) *lease {
	l := &lease{p: p, done: make(chan struct{}), stop: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.deadline = p.start.Add(p.cfg.ttl - drift(p.cfg.ttl))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiry = time.AfterFunc(time.Until(l.deadline), l.expire)
	if p.cfg.refresh {
		l.running.Add(1)
		go l.refresh()
	} else {
		l.stopLocked()
	}
	return l
}

func (l *lease) Key() string    { return l.p.key }
func (l *lease) Holder() string { return l.p.holder }
func (l *lease) Permits() int   { return l.p.permits }
func (l *lease) Fence() uint64  { return l.p.fence }

func (l *lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *lease) Done() <-chan struct{} { return l.done }

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

// stopLocked ends the refresher without waiting for it. l.mu must be held.
func (l *lease) stopLocked() {
	if !l.stopped {
		l.stopped = true
		close(l.stop)
		l.cancel()
	}
}

// endLocked closes done, once. l.mu must be held.
func (l *lease) endLocked() {
	if !l.ended {
		l.ended = true
		l.expiry.Stop()
		close(l.done)
	}
}

func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.stopLocked()
	l.mu.Unlock()
	l.running.Wait() // no refresh may race the release

	held, err := l.p.store.Release(ctx, l.p.key, l.p.holder)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked()
	switch {
	case l.err != nil:
		return fmt.Errorf("leasehold: release %q: %w", l.p.key, l.err)
	case err != nil:
		// The store may still hold the lease; it expires by its TTL.
		return fmt.Errorf("leasehold: release %q: %w", l.p.key, err)
	case !held:
		l.err = fmt.Errorf("%w: the store no longer held it at release (expired or taken)", core.ErrLost)
		return fmt.Errorf("leasehold: release %q: %w", l.p.key, l.err)
	}
	return nil
}

// lose ends the lease as lost and runs the OnLost callback on a goroutine of its own (so that the
// callback may call Release).
func (l *lease) lose(cause error) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.err = fmt.Errorf("%w: %q: %w", core.ErrLost, l.p.key, cause)
	l.stopLocked()
	l.endLocked()
	err := l.err
	l.mu.Unlock()
	if f := l.p.cfg.onLost; f != nil {
		go f(l, err)
	}
}

// expire runs when the deadline timer fires.
func (l *lease) expire() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if d := time.Until(l.deadline); d > 0 { // a refresh moved the deadline just now
		l.expiry.Reset(d)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(errors.New("deadline passed without a successful refresh"))
}

// refresh extends the lease every refresh interval until stopped. After a failed refresh it
// retries sooner, so that a passing fault costs no loss; the expiry timer decides loss.
func (l *lease) refresh() {
	defer l.running.Done()
	every := l.p.cfg.refreshInterval
	t := time.NewTimer(every)
	defer t.Stop()
	req := core.ExtendRequest{Key: l.p.key, Holder: l.p.holder, TTL: l.p.cfg.ttl}
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		select {
		case <-l.stop: // stopped while the timer fired
			return
		default:
		}
		start := time.Now()
		ctx, cancel := context.WithDeadline(l.ctx, l.Deadline())
		res, err := l.p.store.Extend(ctx, req)
		cancel()
		switch {
		case err == nil && res.Fence != l.p.fence:
			l.lose(fmt.Errorf("the holder now holds a newer grant (fence %d)", res.Fence))
			return
		case err == nil:
			l.extended(start)
			t.Reset(every)
		case errors.Is(err, core.ErrLost), errors.Is(err, core.ErrClosed):
			l.lose(fmt.Errorf("refresh: %w", err))
			return
		default:
			if l.ctx.Err() != nil {
				return
			}
			t.Reset(max(min(every, time.Until(l.Deadline())/2), time.Millisecond))
		}
	}
}

// extended moves the deadline after a successful refresh sent at start.
func (l *lease) extended(start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if d := start.Add(l.p.cfg.ttl - drift(l.p.cfg.ttl)); d.After(l.deadline) {
		l.deadline = d
		l.expiry.Reset(time.Until(d))
	}
}

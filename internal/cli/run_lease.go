package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// acquire takes the lease the command runs under: cfg.permits of the key's cfg.limit for run
// (a primitives.Mutex when the limit is 1, a Semaphore otherwise, as errors name it), the key's
// leadership for elect, with cfg.value; waiting as -wait and -n say. With several
// keys, it takes a mutex on each, all or nothing (a primitives.MultiLock: in sorted order, so
// that runs naming the same keys in other orders cannot deadlock), -wait bounding the whole and
// -n trying each once. A bad argument is an error wrapping core.ErrInvalid; a busy key, one
// wrapping core.ErrNotAcquired.
func (c *runConfig) acquire(ctx context.Context, store core.Store) (heldLease, error) {
	timeout := time.Duration(math.MaxInt64) // no acquire timeout
	if c.wait.set {
		timeout = max(c.wait.d, time.Millisecond)
	}
	opts := []primitives.Option{primitives.WithTTL(c.ttl), primitives.WithAcquireTimeout(timeout), primitives.WithStopMargin(c.stopMargin())}
	if c.lockDelay > 0 {
		opts = append(opts, primitives.WithLockDelay(c.lockDelay))
	}
	if c.refreshed != nil {
		refreshed, abandoned, refused := c.refreshed, c.abandoned, c.refused
		opts = append(opts, primitives.WithEvents(func(e primitives.Event) {
			if refused != nil && (e.Kind == primitives.EventRefused || e.Kind == primitives.EventAcquireFailed) {
				key := e.Key
				refused.Store(&key)
			}
			switch {
			case e.Kind == primitives.EventRefreshed:
				select {
				case refreshed <- struct{}{}:
				default:
				}
			case e.Kind == primitives.EventAcquireFailed && !errors.Is(e.Err, core.ErrLimitMismatch) && !errors.Is(e.Err, core.ErrInvalid):
				select {
				case abandoned <- core.ReleaseRequest{Key: e.Key, Holder: e.Holder}: // the holder id is this acquire's own: any fence is its grant
				default:
				}
			}
		}))
	}
	if c.elect {
		if c.oneTry() {
			opts = append(opts, primitives.WithAttempts(1))
		}
		el, err := primitives.NewElection(store, c.key, opts...)
		if err != nil {
			return nil, err
		}
		return el.Campaign(ctx, c.value)
	}
	if c.multi() {
		ml, err := primitives.NewMultiLock(store, c.keys, append(opts, primitives.WithValue(c.value))...)
		if err != nil {
			return nil, err
		}
		var m *primitives.MultiLease
		if c.oneTry() {
			m, err = ml.TryAcquire(ctx)
		} else {
			m, err = ml.Acquire(ctx)
		}
		if err != nil {
			return nil, err
		}
		return multiHeld{m, m.Leases()}, nil
	}
	opts = append(opts, primitives.WithValue(c.value))
	if c.limit == 1 { // a mutex, so named in its errors
		mu, err := primitives.NewMutex(store, c.key, opts...)
		if err != nil {
			return nil, err
		}
		if c.oneTry() {
			return mu.TryAcquire(ctx)
		}
		return mu.Acquire(ctx)
	}
	sem, err := primitives.NewSemaphore(store, c.key, c.limit, opts...)
	if err != nil {
		return nil, err
	}
	if c.oneTry() {
		return sem.TryAcquire(ctx, c.permits)
	}
	return sem.Acquire(ctx, c.permits)
}

// heldLease is what the command runs under: a core.Lease, or a multiHeld.
type heldLease interface {
	Deadline() time.Time
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// multiHeld is the leases of a run on several keys, held together: lost with any of them.
type multiHeld struct {
	*primitives.MultiLease
	leases []core.Lease // one per key, in the order given
}

// Deadline is the earliest of the leases' deadlines, which the command's stop follows: each
// lease is refreshed on its own, and the first not renewed in time stops the command.
func (m multiHeld) Deadline() time.Time {
	d, _ := m.earliest()
	return d
}

// earliest returns the earliest deadline of the leases and its key.
func (m multiHeld) earliest() (time.Time, string) {
	d, key := m.leases[0].Deadline(), m.leases[0].Key()
	for _, l := range m.leases[1:] {
		if ld := l.Deadline(); ld.Before(d) {
			d, key = ld, l.Key()
		}
	}
	return d, key
}

// dueKey is the key whose lease the stop's schedule follows: with several, the one with the
// earliest deadline.
func (c *runConfig) dueKey(lease heldLease) string {
	if m, ok := lease.(multiHeld); ok {
		_, key := m.earliest()
		return key
	}
	return c.key
}

// leaseEnv is what the command is told of its lease: LEASEHOLD_FENCE and LEASEHOLD_HOLDER;
// with several keys, those of the first key given, and LEASEHOLD_FENCES, every key's fence.
func leaseEnv(lease heldLease) []string {
	m, ok := lease.(multiHeld)
	if !ok {
		l := lease.(core.Lease)
		return []string{fmt.Sprintf("LEASEHOLD_FENCE=%d", l.Fence()), "LEASEHOLD_HOLDER=" + l.Holder()}
	}
	fences := make([]string, len(m.leases))
	for i, l := range m.leases {
		fences[i] = fmt.Sprintf("%s=%d", fencesKey(l.Key()), l.Fence())
	}
	return []string{fmt.Sprintf("LEASEHOLD_FENCE=%d", m.leases[0].Fence()), "LEASEHOLD_HOLDER=" + m.leases[0].Holder(),
		"LEASEHOLD_FENCES=" + strings.Join(fences, " ")}
}

// fencesKey is key as LEASEHOLD_FENCES writes it: as it is, or Go-quoted if it is empty or
// holds a space, a quote, an '=' or a character that does not print.
func fencesKey(key string) string {
	if q := plainOrQuoted(key); q != key || strings.Contains(key, "=") {
		return strconv.Quote(key)
	}
	return key
}

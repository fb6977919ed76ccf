package primitives

import (
	"fmt"
	"time"
)

// Defaults for the options.
const (
	DefaultTTL            = 10 * time.Second
	DefaultAcquireTimeout = 10 * time.Second
	DefaultRetryInterval  = 10 * time.Millisecond
)

// Option configures a Mutex or a Semaphore. Options are checked once, by NewMutex or
// NewSemaphore.
type Option func(*config)

type config struct {
	ttl             time.Duration
	acquireTimeout  time.Duration
	attempts        int // 0: unlimited
	retryInterval   time.Duration
	refreshInterval time.Duration // 0: TTL/3
	noRefresh       bool          // WithoutRefresh was given: it wins over WithRefreshInterval
	stopMargin      time.Duration // how long before its deadline a lease not renewed is lost
	stopMarginSet   bool          // WithStopMargin was given (else TTL/10)
	lockDelay       time.Duration // how long the store keeps an expired lease's permits closed
	onLost          func(Lease, error)
	holder          string // "": a fresh random id per lease (WithHolder refuses "")
	value           string // kept with every lease granted (WithValue)
	events          []func(Event)
	err             error // the first invalid option
}

// invalid records the option described by format as invalid, unless one was already.
func (c *config) invalid(format string, args ...any) {
	c.check(fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...)))
}

// check records err, if not nil, as the first invalid option, unless one was already.
func (c *config) check(err error) {
	if c.err == nil {
		c.err = err
	}
}

// checkTTL returns an error wrapping ErrInvalid unless MinTTL <= ttl <= MaxDuration.
func checkTTL(ttl time.Duration) error {
	switch {
	case ttl < MinTTL:
		return fmt.Errorf("%w: ttl %v: must be at least %v", ErrInvalid, ttl, MinTTL)
	case ttl > MaxDuration:
		return fmt.Errorf("%w: ttl %v: must be at most %v (core.MaxDuration)", ErrInvalid, ttl, MaxDuration)
	}
	return nil
}

// checkInterval returns an error wrapping ErrInvalid, naming the interval, unless
// 0 < d <= MaxDuration.
func checkInterval(name string, d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: %s %v: must be > 0", ErrInvalid, name, d)
	case d > MaxDuration:
		return fmt.Errorf("%w: %s %v: must be at most %v (core.MaxDuration)", ErrInvalid, name, d, MaxDuration)
	}
	return nil
}

// MinTTL is the shortest TTL accepted: below it the drift allowance (1% + 2ms) would leave a
// lease almost no time.
const MinTTL = 10 * time.Millisecond

// WithTTL sets how long a lease lives without a refresh (default 10s). It must be at least
// MinTTL (10ms) and at most MaxDuration (about 100 years).
func WithTTL(ttl time.Duration) Option {
	return func(c *config) {
		c.check(checkTTL(ttl))
		c.ttl = ttl
	}
}

// WithAcquireTimeout sets how long Acquire waits before giving up with ErrNotAcquired (default
// 10s). The deadline of the ctx passed to Acquire applies as well. A d above MaxDuration
// (math.MaxInt64, say) means no acquire timeout: Acquire waits until it gets the lease, its
// attempts run out, or ctx ends; a store is then told the caller waits at most MaxDuration.
func WithAcquireTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("acquire timeout %v: must be > 0", d)
		}
		c.acquireTimeout = d
	}
}

// WithAttempts limits how many times Acquire tries the store before giving up with
// ErrNotAcquired (default: unlimited, bounded by the acquire timeout). The tries are spaced by at
// most the retry interval on every store, with or without notifications: WithAttempts(n) gives
// up after about n−1 retry intervals, or sooner at the acquire timeout.
func WithAttempts(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("attempts %d: must be >= 1", n)
		}
		c.attempts = n
	}
}

// WithRetryInterval sets the longest a waiter sleeps with no notification before trying again
// when the store cannot promise notifications (default 10ms): a store without them, or a Redis
// store while its subscription is down. With reliable notifications and unlimited attempts a
// waiter tries only when woken by a release or when the store said the leases in its way
// expire; under WithAttempts it tries at least once per retry interval on every store. It must
// be at most MaxDuration.
func WithRetryInterval(d time.Duration) Option {
	return func(c *config) {
		c.check(checkInterval("retry interval", d))
		c.retryInterval = d
	}
}

// WithRefreshInterval sets how often a held lease is refreshed (default TTL/3). It must be at
// most half of the TTL less the drift allowance (1% + 2ms), so that a failed refresh has time
// to be retried before the deadline, and at most MaxDuration.
func WithRefreshInterval(d time.Duration) Option {
	return func(c *config) {
		c.check(checkInterval("refresh interval", d))
		c.refreshInterval = d
	}
}

// WithStopMargin sets how long before its deadline a lease that was not renewed in time is
// reported lost (Done closes, Err wraps ErrLost, OnLost runs, contexts from LeaseContext and Do
// are canceled): work bound to the lease then has d to stop before the store can grant the key
// to another holder. The default is a tenth of the TTL; 0 reports the loss at the deadline
// itself. A margin below 0, or of half the TTL or more (which would leave refreshes no time to
// be retried), is ErrInvalid.
func WithStopMargin(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("stop margin %v: must be at least 0", d)
		}
		c.stopMargin, c.stopMarginSet = d, true
	}
}

// WithLockDelay sets how long, by the store's clock, a lease that expires unreleased keeps its
// permits closed to new grants after its expiry: a holder that stalled (a GC pause, SIGSTOP, a
// slow disk) or died, and may still act on what it guarded, has d more to notice before the key
// passes on. A released lease leaves no delay; the default is 0. The store enforces it, so it
// holds whatever state the stale holder's machine is in. It costs nothing until a lease expires,
// and then holds up the key's waiters for d. d must be in [0, MaxDuration].
func WithLockDelay(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > MaxDuration {
			c.invalid("lock delay %v: must be in [0, %v] (core.MaxDuration)", d, MaxDuration)
		}
		c.lockDelay = d
	}
}

// WithoutRefresh turns the background refresh off: a lease lives for one TTL unless the caller
// releases or extends it first, and is reported lost when its deadline passes. It wins over
// WithRefreshInterval, whatever their order.
func WithoutRefresh() Option {
	return func(c *config) { c.noRefresh = true }
}

// WithOnLost sets a callback run once, on its own goroutine, when a lease is lost; err wraps
// ErrLost and says why.
func WithOnLost(f func(Lease, error)) Option {
	return func(c *config) { c.onLost = f }
}

// WithHolder sets the holder id that leases are acquired under, instead of a fresh 128-bit
// random id per lease. Two acquires with one holder id share one lease (a store grants a lease
// again to its holder), so use it to adopt or re-enter a lease on purpose, not to name a process.
// A lease under it that has been lost is not released in the store (its Release sends nothing
// and returns the loss): the store may have granted the id again since, the same lease and
// fence, which the release would end. The store ends it at its expiry.
func WithHolder(id string) Option {
	return func(c *config) {
		if id == "" {
			c.invalid("holder: must not be empty")
		}
		c.holder = id
	}
}

// WithValue sets the value kept with every lease granted (core.AcquireRequest.Value): a short
// label of who holds it, such as "host-a pid 4242", that Inspect reports beside the lease and
// Lease.Value returns. It is at most MaxValueLen (1024) bytes; the default is "".
func WithValue(v string) Option {
	return func(c *config) {
		c.check(checkValue(v))
		c.value = v
	}
}

// checkValue returns an error wrapping ErrInvalid if v is longer than MaxValueLen.
func checkValue(v string) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("%w: value of %d bytes: must be at most %d (core.MaxValueLen)", ErrInvalid, len(v), MaxValueLen)
	}
	return nil
}

func newConfig(opts []Option) (config, error) {
	c := config{
		ttl:            DefaultTTL,
		acquireTimeout: DefaultAcquireTimeout,
		retryInterval:  DefaultRetryInterval,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err != nil {
		return c, c.err
	}
	if c.refreshInterval == 0 {
		c.refreshInterval = c.ttl / 3
	}
	if !c.stopMarginSet {
		c.stopMargin = c.ttl / 10
	}
	if c.stopMargin >= c.ttl/2 {
		return c, fmt.Errorf("%w: stop margin %v: must be less than half the ttl %v", ErrInvalid, c.stopMargin, c.ttl)
	}
	if valid := c.ttl - drift(c.ttl); !c.noRefresh && c.refreshInterval > valid/2 {
		return c, fmt.Errorf("%w: refresh interval %v: must be at most half the lease's validity (%v of ttl %v), so a failed refresh can be retried in time",
			ErrInvalid, c.refreshInterval, valid, c.ttl)
	}
	return c, nil
}

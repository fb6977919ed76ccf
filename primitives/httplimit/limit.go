// Package httplimit is net/http middleware that caps concurrent requests across every server
// process sharing a Leasehold store: each request holds permits of a primitives.Semaphore on
// its key (one per route, tenant, or whatever the key function says) while it runs.
//
//	limit, err := httplimit.New(store, 100, httplimit.WithKey(func(r *http.Request) string { return r.URL.Path }))
//	http.ListenAndServe(addr, limit(mux))
//
// When the key is full a request gets 503 Service Unavailable with Retry-After (after waiting
// up to WithWait, if set). A request whose lease is lost has its context canceled, with a cause
// wrapping core.ErrLost. If the store cannot be reached the request also gets 503: the limiter
// fails closed. Cost per request: one store round trip to acquire and one to release, plus one
// refresh per TTL/3 while it runs.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Defaults. A request counts against DefaultPrefix+DefaultKey ("httplimit:httplimit" in the
// store) unless WithKey and WithPrefix say otherwise; that is the key to Inspect.
const (
	DefaultPrefix = "httplimit:"
	DefaultKey    = "httplimit"
)

// retryAfter is the Retry-After, in seconds, of a refused request. Slots are freed by releases,
// which the limiter cannot foresee, so it names the smallest value the header can carry.
const retryAfter = 1

// maxReleaseTimeout bounds the release sent after a request, detached from the request's
// context so that a client that went away still frees its slot.
const maxReleaseTimeout = 5 * time.Second

// Option configures the middleware. Options are checked once, by New.
type Option func(*config)

type config struct {
	key     func(*http.Request) string
	permits func(*http.Request) int
	prefix  string
	wait    time.Duration
	ttl     time.Duration
	reject  http.Handler
	err     error // the first invalid option
}

func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s", core.ErrInvalid, fmt.Sprintf(format, args...))
	}
}

// WithKey sets the function that names the key a request counts against (default: every
// request counts against DefaultKey). The name is prefixed (WithPrefix); an empty name counts
// against DefaultKey. The middleware keeps one Semaphore per distinct name for its lifetime, so
// f must return a bounded set of names (routes, known tenants), not raw client input.
func WithKey(f func(*http.Request) string) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("key func: must not be nil")
		}
		c.key = f
	}
}

// WithPermits sets how many permits a request takes (default 1), for requests of different
// weights. A request for which f returns fewer than 1 or more than the limit gets 400 Bad
// Request and touches no store.
func WithPermits(f func(*http.Request) int) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("permits func: must not be nil")
		}
		c.permits = f
	}
}

// WithPrefix sets the prefix of the store keys (default DefaultPrefix, "httplimit:"), so that
// several limiters on one store stay apart.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithWait sets how long a request may wait for room (default 0: one store round trip, and
// refused at once when the key is full). While it waits, a request is woken by releases as any
// Semaphore waiter is; a client that goes away stops its wait. A d above core.MaxDuration means
// no limit but the request's own context, as for primitives.WithAcquireTimeout.
func WithWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("wait %v: must be >= 0", d)
		}
		c.wait = d
	}
}

// WithTTL sets the lease TTL (default primitives.DefaultTTL, 10s; at least primitives.MinTTL,
// at most core.MaxDuration). Leases are refreshed every TTL/3 while the request runs, so a
// server that dies frees its slots after one TTL.
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		switch {
		case d < primitives.MinTTL:
			c.invalid("ttl %v: must be at least %v", d, primitives.MinTTL)
		case d > core.MaxDuration:
			c.invalid("ttl %v: must be at most %v (core.MaxDuration)", d, core.MaxDuration)
		}
		c.ttl = d
	}
}

// WithRejectHandler sets the handler that answers requests turned away because the key is full
// (default: 503 with Retry-After and a short text body). It does not answer store failures.
func WithRejectHandler(h http.Handler) Option {
	return func(c *config) {
		if h == nil {
			c.invalid("reject handler: must not be nil")
		}
		c.reject = h
	}
}

// New returns middleware that lets at most limit permits' worth of requests per key run at once
// across every process sharing store. It checks its arguments and options and returns an error
// wrapping core.ErrInvalid naming the bad one; it sends nothing to the store.
//
// Per request the middleware sends one store round trip to acquire (more while waiting, under
// WithWait), one refresh per TTL/3 while the handler runs, and one to release after the handler
// returns — also when it panics, before the panic goes on. The handler runs with a context
// canceled, cause wrapping core.ErrLost, if the lease is lost.
//
// Refusals: a full key gets 503 with Retry-After (or the WithRejectHandler). A store error gets
// 503 too, with a body saying the limiter is unavailable: the limiter fails closed, since
// letting requests through unlimited is what it exists to prevent. It logs nothing.
//
// The middleware is safe for concurrent use and may wrap any number of handlers, which then
// share its keys.
func New(store core.Store, limit int, opts ...Option) (func(http.Handler) http.Handler, error) {
	c := config{prefix: DefaultPrefix, ttl: primitives.DefaultTTL}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.err != nil:
	case store == nil:
		c.invalid("store: must not be nil")
	case limit < 1:
		c.invalid("limit %d: must be >= 1", limit)
	case limit > core.MaxLimit:
		c.invalid("limit %d: must be at most %d (core.MaxLimit)", limit, core.MaxLimit)
	}
	if c.err != nil {
		return nil, fmt.Errorf("leasehold: new httplimit: %w", c.err)
	}
	l := &limiter{store: store, limit: limit, cfg: c, opts: []primitives.Option{primitives.WithTTL(c.ttl)}}
	if c.wait > 0 {
		l.opts = append(l.opts, primitives.WithAcquireTimeout(c.wait))
	}
	// Building the default key's Semaphore checks the options once, here, and costs no store
	// call. Its error names the operation and key already.
	if _, err := l.semaphore(DefaultKey); err != nil {
		return nil, err
	}
	return l.wrap, nil
}

type limiter struct {
	store core.Store
	limit int
	cfg   config
	opts  []primitives.Option
	sems  sync.Map // key name → *primitives.Semaphore
}

func (l *limiter) semaphore(key string) (*primitives.Semaphore, error) {
	if s, ok := l.sems.Load(key); ok {
		return s.(*primitives.Semaphore), nil
	}
	s, err := primitives.NewSemaphore(l.store, l.cfg.prefix+key, l.limit, l.opts...)
	if err != nil {
		return nil, err
	}
	got, _ := l.sems.LoadOrStore(key, s)
	return got.(*primitives.Semaphore), nil
}

func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := DefaultKey
		if l.cfg.key != nil {
			if k := l.cfg.key(r); k != "" {
				key = k
			}
		}
		n := 1
		if l.cfg.permits != nil {
			n = l.cfg.permits(r)
		}
		if n < 1 || n > l.limit {
			http.Error(w, fmt.Sprintf("request asks for %d permits; the limit is %d", n, l.limit), http.StatusBadRequest)
			return
		}
		sem, err := l.semaphore(key)
		if err != nil { // not reached: New checked the options, and the key is not empty
			http.Error(w, "concurrency limiter misconfigured", http.StatusInternalServerError)
			return
		}
		var lease core.Lease
		if l.cfg.wait > 0 {
			lease, err = sem.Acquire(r.Context(), n)
		} else {
			lease, err = sem.TryAcquire(r.Context(), n)
		}
		if err != nil {
			l.refuse(w, r, err)
			return
		}
		ctx, cancel := primitives.LeaseContext(r.Context(), lease)
		defer func() {
			// A plain defer, no recover: a panicking handler's slot is freed here and the panic
			// goes on to the server. The release is detached from the request's context so that a
			// client that went away still frees the slot; a lost lease has nothing left to free,
			// and nobody to tell, so its error is dropped.
			cancel()
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(r.Context()), min(l.cfg.ttl, maxReleaseTimeout))
			defer rcancel()
			lease.Release(rctx)
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// refuse answers a request that got no lease.
func (l *limiter) refuse(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, core.ErrNotAcquired):
		if l.cfg.reject != nil {
			l.cfg.reject.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		http.Error(w, "too many concurrent requests; retry later", http.StatusServiceUnavailable)
	case r.Context().Err() != nil:
		// The client went away while waiting: nobody reads this, but the server's logs should
		// not show the limiter as unavailable, nor the request as served.
		http.Error(w, "request canceled while waiting for a slot", http.StatusServiceUnavailable)
	default:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		http.Error(w, "concurrency limiter unavailable", http.StatusServiceUnavailable)
	}
}

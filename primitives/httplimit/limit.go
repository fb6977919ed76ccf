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

// Option configures the middleware.
type Option func(*config)

type config struct {
	key     func(*http.Request) string
	permits func(*http.Request) int
	prefix  string
	wait    time.Duration
	ttl     time.Duration
	reject  http.Handler
	err     error
}

func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s", core.ErrInvalid, fmt.Sprintf(format, args...))
	}
}

// WithKey sets the function that names the key a request counts against (default: one key for
// all requests). An empty name counts against the default key.
func WithKey(f func(*http.Request) string) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("key func: must not be nil")
		}
		c.key = f
	}
}

// WithPermits sets how many permits a request takes (default 1); a request asking for fewer
// than 1 or more than the limit gets 400 Bad Request.
func WithPermits(f func(*http.Request) int) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("permits func: must not be nil")
		}
		c.permits = f
	}
}

// WithPrefix sets the prefix of the keys (default "httplimit:").
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithWait sets how long a request may wait for room (default 0: refused at once when full).
func WithWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("wait %v: must be >= 0", d)
		}
		c.wait = d
	}
}

// WithTTL sets the lease TTL (default primitives.DefaultTTL); leases are refreshed while the
// request runs, so a server that dies frees its slots after one TTL.
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		if d < primitives.MinTTL {
			c.invalid("ttl %v: must be at least %v", d, primitives.MinTTL)
		}
		c.ttl = d
	}
}

// WithRejectHandler sets the handler that answers requests turned away because the key is full
// (default: 503 with Retry-After and a short text body).
func WithRejectHandler(h http.Handler) Option {
	return func(c *config) {
		if h == nil {
			c.invalid("reject handler: must not be nil")
		}
		c.reject = h
	}
}

// New returns the middleware for limit concurrent requests per key over store. It checks its
// arguments and returns an error wrapping core.ErrInvalid naming a bad one; it calls no store.
// The middleware is safe for concurrent use; it builds one Semaphore per key, once.
func New(store core.Store, limit int, opts ...Option) (func(http.Handler) http.Handler, error) {
	c := config{prefix: "httplimit:", ttl: primitives.DefaultTTL}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.err != nil:
	case store == nil:
		c.invalid("store: must not be nil")
	case limit < 1:
		c.invalid("limit %d: must be >= 1", limit)
	}
	if c.err != nil {
		return nil, fmt.Errorf("leasehold/httplimit: new: %w", c.err)
	}
	semOpts := []primitives.Option{primitives.WithTTL(c.ttl)}
	if c.wait > 0 {
		semOpts = append(semOpts, primitives.WithAcquireTimeout(c.wait))
	}
	// Check the options once, on a probe key, so that a bad combination fails here.
	if _, err := primitives.NewSemaphore(store, c.prefix+"probe", limit, semOpts...); err != nil {
		return nil, fmt.Errorf("leasehold/httplimit: new: %w", err)
	}
	l := &limiter{store: store, limit: limit, cfg: c, opts: semOpts}
	return l.wrap, nil
}

type limiter struct {
	store core.Store
	limit int
	cfg   config
	opts  []primitives.Option
	sems  sync.Map // key → *primitives.Semaphore
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
		key := "default"
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
			http.Error(w, fmt.Sprintf("request asks for %d permits of %d", n, l.limit), http.StatusBadRequest)
			return
		}
		sem, err := l.semaphore(key)
		if err != nil {
			http.Error(w, "concurrency limiter misconfigured", http.StatusInternalServerError)
			return
		}
		var lease core.Lease
		if l.cfg.wait > 0 {
			lease, err = sem.Acquire(r.Context(), n)
		} else {
			lease, err = sem.TryAcquire(r.Context(), n)
		}
		switch {
		case errors.Is(err, core.ErrNotAcquired):
			if l.cfg.reject != nil {
				l.cfg.reject.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Retry-After", strconv.Itoa(1))
			http.Error(w, "too many concurrent requests; retry later", http.StatusServiceUnavailable)
			return
		case err != nil:
			if r.Context().Err() != nil {
				return // the client went away
			}
			w.Header().Set("Retry-After", strconv.Itoa(1))
			http.Error(w, "concurrency limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := primitives.LeaseContext(r.Context(), lease)
		defer func() {
			cancel()
			// Release even if the client went away; a lost lease has nothing left to free.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
			lease.Release(rctx)
			rcancel()
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

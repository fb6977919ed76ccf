// Package httpfence carries a lease's fencing token over HTTP and refuses a stale one where the
// request lands: a client Transport sends the fence of the lease it writes under in the
// Leasehold-Fence header, and server Middleware turns away a request whose fence is below the
// highest its Guard accepted for the request's resource.
//
//	// client, while it holds lease:
//	client := &http.Client{Transport: httpfence.Transport(nil, lease)}
//	// server:
//	fenced, err := httpfence.Middleware(store.Fenced, func(r *http.Request) string { return r.URL.Path })
//	http.ListenAndServe(addr, fenced(mux))
//
// A stale request gets 409 Conflict and never reaches the handler; a request without the header,
// with a malformed one, or with a fence its Guard does not take (above 2^63 − 1), gets 400 Bad
// Request; a Guard that fails otherwise (its store is down)
// gets 503 Service Unavailable. The handler runs inside the Guard: with memory.Store.Fenced, the
// check, the handler and the record are one step in the server process, so a stale request can
// never write after a newer one there. A Guard made with CheckFirst (a shared store's check, such
// as goredis.Store.Fenced's) records the fence before the handler runs, and so cannot stop a stale
// request that passed its check from writing after a newer one that came later: fence the write
// itself too, with the fence FromContext returns.
package httpfence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/leasehold/leasehold/core"
)

// Header is the request header that carries the fence: a decimal uint64, at least 1.
const Header = "Leasehold-Fence"

// Guard runs serve only if fence is at least the highest accepted for resource before, recording
// it as the highest; a lower fence returns an error wrapping core.ErrStaleFence without running
// serve. memory.Store.Fenced is one; CheckFirst makes one from a store's check.
type Guard func(ctx context.Context, resource string, fence uint64, serve func() error) error

// CheckFirst returns a Guard that calls check (which records fence for resource, or refuses it
// with core.ErrStaleFence) and then serve. The check and serve are not one step: see the package
// doc. For go-redis:
//
//	httpfence.CheckFirst(func(ctx context.Context, resource string, fence uint64) error {
//		return store.Fenced(ctx, resource, fence, func(redis.Pipeliner) error { return nil })
//	})
func CheckFirst(check func(ctx context.Context, resource string, fence uint64) error) Guard {
	return func(ctx context.Context, resource string, fence uint64, serve func() error) error {
		if err := check(ctx, resource, fence); err != nil {
			return err
		}
		return serve()
	}
}

// Transport returns a RoundTripper that sends lease's fence in Header with every request, over
// base (http.DefaultTransport if nil). A request made after the lease ended is not sent: it fails
// with an error wrapping core.ErrLost (lost) or core.ErrNotHeld (released). It sets the header on a clone of the request, as a
// RoundTripper must not change it.
func Transport(base http.RoundTripper, lease core.Lease) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper{base: base, lease: lease}
}

type roundTripper struct {
	base  http.RoundTripper
	lease core.Lease
}

func (t roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case <-t.lease.Done():
		if r.Body != nil {
			r.Body.Close()
		}
		err := t.lease.Err()
		if err == nil {
			err = fmt.Errorf("%w: the lease was released", core.ErrNotHeld)
		}
		return nil, fmt.Errorf("httpfence: %s %s not sent: %w", r.Method, r.URL.Redacted(), err)
	default:
	}
	r = r.Clone(r.Context())
	r.Header.Set(Header, strconv.FormatUint(t.lease.Fence(), 10))
	return t.base.RoundTrip(r)
}

type fenceKey struct{}

// FromContext returns the fence the Middleware accepted for the request whose context ctx is.
func FromContext(ctx context.Context) (uint64, bool) {
	f, ok := ctx.Value(fenceKey{}).(uint64)
	return f, ok
}

// Middleware returns middleware that serves a request only through guard, with the fence in its
// Header and the resource that resource names (a path, a tenant); see the package doc for the
// status of a request refused. A nil guard or resource is an error wrapping core.ErrInvalid.
func Middleware(guard Guard, resource func(*http.Request) string) (func(http.Handler) http.Handler, error) {
	switch {
	case guard == nil:
		return nil, fmt.Errorf("httpfence: %w: guard: must not be nil", core.ErrInvalid)
	case resource == nil:
		return nil, fmt.Errorf("httpfence: %w: resource func: must not be nil", core.ErrInvalid)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fence, err := strconv.ParseUint(r.Header.Get(Header), 10, 64)
			if err != nil || fence == 0 {
				http.Error(w, fmt.Sprintf("httpfence: header %s: want a fence, a decimal number of at least 1", Header), http.StatusBadRequest)
				return
			}
			res := resource(r)
			served := false
			err = guard(r.Context(), res, fence, func() error {
				served = true
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), fenceKey{}, fence)))
				return nil
			})
			switch {
			case served:
			case errors.Is(err, core.ErrStaleFence):
				http.Error(w, fmt.Sprintf("httpfence: %q: fence %d is stale: %v", res, fence, err), http.StatusConflict)
			case errors.Is(err, core.ErrInvalid):
				http.Error(w, fmt.Sprintf("httpfence: %q: fence %d refused: %v", res, fence, err), http.StatusBadRequest)
			case err != nil:
				http.Error(w, fmt.Sprintf("httpfence: %q: fence %d not checked: %v", res, fence, err), http.StatusServiceUnavailable)
			}
		})
	}, nil
}

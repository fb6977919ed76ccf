package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives/httplimit"
)

// refusals counts the store's refused tries that take a place in the line.
type refusals struct {
	*memory.Store
	n atomic.Int32
}

func (r *refusals) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := r.Store.Acquire(ctx, req)
	if err == nil && !res.Granted && req.Wait > 0 {
		r.n.Add(1)
	}
	return res, err
}

// TestCanceledWaitingRequestGivesUpItsPlace guards the line under the middleware: a request
// waiting for a slot (WithWait) whose client goes away leaves the line, so that when the
// running request ends the slot goes to the request behind it at once, not after the TTL of a
// grant made to a request that is gone.
func TestCanceledWaitingRequestGivesUpItsPlace(t *testing.T) {
	store := &refusals{Store: memory.New()}
	t.Cleanup(func() { store.Close() })
	limit, err := httplimit.New(store, 1, httplimit.WithWait(time.Minute), httplimit.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	running, finish := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			close(running)
			<-finish
		}
	}))
	serve := func(ctx context.Context) <-chan int {
		out := make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			out <- rec.Code
		}()
		return out
	}
	r1 := serve(context.Background())
	<-running
	gone, cancel := context.WithCancel(context.Background())
	r2 := serve(gone)
	poll.Until(t, "the second request in line", func() bool { return store.n.Load() >= 1 })
	r3 := serve(context.Background())
	poll.Until(t, "the third request in line behind it", func() bool { return store.n.Load() >= 2 })
	cancel()
	if code := <-r2; code != http.StatusServiceUnavailable {
		t.Fatalf("canceled request: %d", code)
	}
	close(finish)
	if code := <-r1; code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	select {
	case code := <-r3:
		if code != http.StatusOK {
			t.Fatalf("request behind the canceled one: %d", code)
		}
	case <-time.After(poll.Timeout):
		t.Fatalf("the request behind a canceled waiter did not get the freed slot within %v (TTL is a minute)", poll.Timeout)
	}
}

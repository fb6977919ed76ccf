package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/core"
)

// Close while acquires, waits, releases and inspects are in flight: each returns, with its
// answer or an error wrapping core.ErrClosed, and nothing of the Store's runs on after it (goleak
// checks that after the package's tests).
func TestCloseWithOperationsInFlight(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		key := uniqueKey(t)
		s, err := etcd.New(etcdClient(t))
		if err != nil {
			t.Fatal(err)
		}
		other := newStore(t)
		mustAcquire(t, other, req(key, "h", 1, 2))
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 12 {
			wg.Go(func() {
				h := fmt.Sprint("w", i)
				r := req(key, h, 1, 2)
				r.Wait = time.Minute
				res, err := s.Acquire(ctx, r)
				if err == nil && !res.Granted {
					var w core.Waiter
					if w, err = s.Register(ctx, r); err == nil {
						select {
						case <-w.C():
						case <-time.After(100 * time.Millisecond):
						}
						w.Close()
					}
				}
				if err == nil && res.Granted {
					_, err = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: h, Fence: res.Fence})
				}
				if err == nil {
					_, err = s.Inspect(ctx, key)
				}
				if err != nil && !errors.Is(err, core.ErrClosed) {
					errs <- err
				}
			})
		}
		time.Sleep(time.Duration(round) * 5 * time.Millisecond) // the point: Close at various moments
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("an operation in flight at Close: %v; want its answer or ErrClosed", err)
		}
	}
}

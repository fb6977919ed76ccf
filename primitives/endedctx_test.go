package primitives_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// TestAcquireWithEndedCtxCallsNoStore: every acquire path, called with a ctx that has ended,
// returns ctx's error without calling the store: no try, and so no give-back of what a try might
// have taken. With and without a store that keeps a line (the RWMutex then goes through its
// writer's intent and the readers' gate).
func TestAcquireWithEndedCtxCallsNoStore(t *testing.T) {
	for name, wrap := range map[string]func(*recorder) core.Store{
		"line":    func(r *recorder) core.Store { return notifying{r} },
		"no line": func(r *recorder) core.Store { return r },
	} {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder()
			store := wrap(rec)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			m, err := primitives.NewMutex(store, "m")
			if err != nil {
				t.Fatal(err)
			}
			shared, err := primitives.NewMutex(store, "shared", primitives.WithHolder("me"))
			if err != nil {
				t.Fatal(err)
			}
			sem, err := primitives.NewSemaphore(store, "s", 3)
			if err != nil {
				t.Fatal(err)
			}
			rw, err := primitives.NewRWMutex(store, "rw")
			if err != nil {
				t.Fatal(err)
			}
			el, err := primitives.NewElection(store, "el")
			if err != nil {
				t.Fatal(err)
			}
			ml, err := primitives.NewMultiLock(store, []string{"a", "b"})
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func() error{
				"Mutex.Acquire":          func() error { _, err := m.Acquire(ctx); return err },
				"Mutex.TryAcquire":       func() error { _, err := m.TryAcquire(ctx); return err },
				"Mutex.Acquire (holder)": func() error { _, err := shared.Acquire(ctx); return err },
				"Mutex.Do": func() error {
					return m.Do(ctx, func(context.Context, core.Lease) error { return nil })
				},
				"Semaphore.Acquire":      func() error { _, err := sem.Acquire(ctx, 2); return err },
				"Semaphore.TryAcquire":   func() error { _, err := sem.TryAcquire(ctx, 1); return err },
				"RWMutex.Acquire":        func() error { _, err := rw.Acquire(ctx); return err },
				"RWMutex.TryAcquire":     func() error { _, err := rw.TryAcquire(ctx); return err },
				"RWMutex.AcquireRead":    func() error { _, err := rw.AcquireRead(ctx); return err },
				"RWMutex.TryAcquireRead": func() error { _, err := rw.TryAcquireRead(ctx); return err },
				"Election.Campaign":      func() error { _, err := el.Campaign(ctx, "v"); return err },
				"MultiLock.Acquire":      func() error { _, err := ml.Acquire(ctx); return err },
				"MultiLock.TryAcquire":   func() error { _, err := ml.TryAcquire(ctx); return err },
			}
			for name, call := range calls {
				if err := call(); !errors.Is(err, context.Canceled) {
					t.Errorf("%s with a canceled ctx = %v; want an error wrapping context.Canceled", name, err)
				}
				if n := rec.calls(); n != 0 {
					t.Fatalf("%s with a canceled ctx: the store saw %d calls, want none", name, n)
				}
			}
		})
	}
}

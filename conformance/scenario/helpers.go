package scenario

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// GoBackground runs f on a goroutine of its own, with a ctx that ends when t does, and waits
// for it then, so that a failed test leaves nothing behind to report after it ends.
func GoBackground(t testing.TB, f func(ctx context.Context)) {
	var wg sync.WaitGroup
	wg.Go(func() { f(t.Context()) })
	t.Cleanup(wg.Wait)
}

// MustRWMutex returns primitives.NewRWMutex(store, key, opts...), and fails t at once if that
// fails.
func MustRWMutex(t testing.TB, store core.Store, key string, opts ...primitives.Option) *primitives.RWMutex {
	t.Helper()
	rw, err := primitives.NewRWMutex(store, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

// MustElection returns primitives.NewElection(store, key, opts...), and fails t at once if that
// fails.
func MustElection(t testing.TB, store core.Store, key string, opts ...primitives.Option) *primitives.Election {
	t.Helper()
	el, err := primitives.NewElection(store, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return el
}

// MustMutex returns primitives.NewMutex(store, key, opts...), and fails t at once if that fails.
func MustMutex(t testing.TB, store core.Store, key string, opts ...primitives.Option) *primitives.Mutex {
	t.Helper()
	m, err := primitives.NewMutex(store, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// MustMultiLock returns primitives.NewMultiLock(store, keys, opts...), and fails t at once if
// that fails.
func MustMultiLock(t testing.TB, store core.Store, keys []string, opts ...primitives.Option) *primitives.MultiLock {
	t.Helper()
	ml, err := primitives.NewMultiLock(store, keys, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ml
}

// Observer reads an Observe channel, failing its test when nothing comes within 10s.
type Observer struct {
	t  testing.TB
	ch <-chan primitives.Leader
}

// NewObserver returns an Observer of ch (an Election's Observe channel) that fails t.
func NewObserver(t testing.TB, ch <-chan primitives.Leader) Observer {
	return Observer{t, ch}
}

// Next returns the next change on the channel; it fails the test at once if the channel closes
// or nothing comes within 10s.
func (o Observer) Next() primitives.Leader {
	o.t.Helper()
	select {
	case ld, ok := <-o.ch:
		if !ok {
			o.t.Fatal("the Observe channel closed")
		}
		return ld
	case <-time.After(10 * time.Second):
		o.t.Fatal("no leader change observed within 10s")
		return primitives.Leader{}
	}
}

// Expect reads the next change and fails the test at once unless it is want.
func (o Observer) Expect(want primitives.Leader) {
	o.t.Helper()
	if ld := o.Next(); ld != want {
		o.t.Fatalf("observed %+v, want %+v", ld, want)
	}
}

// LeaderOf returns the Leader that l's holder is, as Observe and Leader report it.
func LeaderOf(l core.Lease) primitives.Leader {
	return primitives.Leader{Value: l.Value(), Holder: l.Holder(), Fence: l.Fence()}
}

// LineLength returns a func reporting how many wait in key's line on s (-1 if s's Inspect
// fails); it suits a store with a line.
func LineLength(s core.Store, key string) func() int {
	return func() int {
		snap, err := s.Inspect(context.Background(), key)
		if err != nil {
			return -1
		}
		return len(snap.Waiters)
	}
}

// WriterInLine returns a func reporting whether a writer waits in rw's line, as rw's Inspect
// sees it; it suits a store with a line.
func WriterInLine(rw *primitives.RWMutex) func(context.Context) bool {
	return func(ctx context.Context) bool {
		st, err := rw.Inspect(ctx)
		return err == nil && slices.ContainsFunc(st.Waiters, func(w primitives.RWWaiter) bool { return w.Write })
	}
}

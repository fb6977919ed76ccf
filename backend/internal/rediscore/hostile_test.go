package rediscore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// everyStore makes a store of each driver, the memory store included, on one server.
func everyStore(t *testing.T) map[string]func() redisharness.Store {
	srv := redistest.StartServer(t)
	mem := memory.New()
	out := map[string]func() redisharness.Store{"memory": func() redisharness.Store { return memStore{mem} }}
	for name, mk := range drivers(t) {
		out[name] = func() redisharness.Store { return mk(t, srv.Addr) }
	}
	return out
}

// memStore gives the memory store the store interface (its Close is a no-op here: the store
// is shared by the test's "processes").
type memStore struct{ *memory.Store }

func (memStore) Close() error { return nil }

// TestHostileKeys: keys of the longest length, not UTF-8, or full of the layout's own characters
// each lock on their own, distinct from every other, on every driver; an empty one, and one past
// core.MaxKeyLen, are refused.
func TestHostileKeys(t *testing.T) {
	t.Parallel()
	keys := []string{
		strings.Repeat("k", core.MaxKeyLen),
		strings.Repeat("k", core.MaxKeyLen-1),
		"\xff\xfe\x00not utf-8",
		"{a}", "a}", "{", "}", "{}", "a:b", ":", "%7B", "%",
		"leasehold:a", "leasehold:{a}:leases", // the prefix and a Redis key of ours, as user keys
		"a",
	}
	for name, mk := range everyStore(t) {
		t.Run(name, func(t *testing.T) {
			s := mk()
			ctx := context.Background()
			if _, err := primitives.NewMutex(s, ""); !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "key") {
				t.Errorf("empty key: %v, want ErrInvalid naming the key", err)
			}
			if _, err := primitives.NewMutex(s, strings.Repeat("k", 1<<20)); !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "core.MaxKeyLen") {
				t.Errorf("key of 1 MiB: %v, want ErrInvalid naming core.MaxKeyLen", err)
			}
			var held []core.Lease
			for _, k := range keys {
				m, err := primitives.NewMutex(s, k)
				if err != nil {
					t.Fatalf("key %.20q: %v", k, err)
				}
				l, err := m.TryAcquire(ctx)
				if err != nil {
					t.Fatalf("key %.20q is not free, though no key before it is the same: %v", k, err)
				}
				held = append(held, l)
				if _, err := m.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
					t.Errorf("key %.20q: a second TryAcquire got %v, want ErrNotAcquired", k, err)
				}
			}
			for i, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Errorf("key %.20q: release: %v", keys[i], err)
				}
			}
		})
	}
}

// TestForeignHolderChangesNothing: releasing or extending with another holder's id, or one made
// up, leaves the real holder's lease as it was.
func TestForeignHolderChangesNothing(t *testing.T) {
	t.Parallel()
	for name, mk := range everyStore(t) {
		t.Run(name, func(t *testing.T) {
			s := mk()
			ctx := context.Background()
			m, _ := primitives.NewMutex(s, "foreign", primitives.WithTTL(time.Minute))
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			for _, h := range []string{"guess", strings.Repeat("0", 32), l.Holder() + " ", strings.ToUpper(l.Holder())} {
				if held, err := s.Release(ctx, core.ReleaseRequest{Key: "foreign", Holder: h}); err != nil || held {
					t.Errorf("Release with holder %q: %v, %v; want false, nil", h, held, err)
				}
				if _, err := s.Extend(ctx, core.ExtendRequest{Key: "foreign", Holder: h, TTL: time.Minute}); !errors.Is(err, core.ErrLost) {
					t.Errorf("Extend with holder %q: %v, want ErrLost", h, err)
				}
			}
			snap, err := s.Inspect(ctx, "foreign")
			if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != l.Holder() || snap.Leases[0].Fence != l.Fence() {
				t.Fatalf("after foreign calls: %+v, %v; want the holder's lease unchanged", snap, err)
			}
		})
	}
}

// TestLimitsDisagree: clients that use different limits on one key are refused while the key is
// held under another (whichever they ask), and the key's limit is the next one's once it is free.
func TestLimitsDisagree(t *testing.T) {
	t.Parallel()
	for name, mk := range everyStore(t) {
		t.Run(name, func(t *testing.T) {
			s := mk()
			ctx := context.Background()
			two, _ := primitives.NewSemaphore(s, "limits", 2)
			three, _ := primitives.NewSemaphore(s, "limits", 3)
			one, _ := primitives.NewSemaphore(s, "limits", 1)
			a, err := two.TryAcquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, sem := range []*primitives.Semaphore{three, one} {
				if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, core.ErrLimitMismatch) {
					t.Errorf("another limit with 1 of 2 held: %v, want ErrLimitMismatch", err)
				}
			}
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			b, err := three.TryAcquire(ctx, 3)
			if err != nil {
				t.Fatalf("limit 3 on the free key: %v, want a grant", err)
			}
			defer b.Release(ctx)
			if _, err := two.TryAcquire(ctx, 1); !errors.Is(err, core.ErrLimitMismatch) {
				t.Errorf("limit 2 with 3 of 3 held: %v, want ErrLimitMismatch", err)
			}
		})
	}
}

// TestThousandsOfWaiters: thousands of callers (10 000 under LEASEHOLD_SOAK=1) wait on one
// key; each gets the lock in turn, and none is left waiting.
func TestThousandsOfWaiters(t *testing.T) {
	testenv.SkipShort(t, "thousands of waiters")
	t.Parallel()
	waiters := testenv.Pick(2000, 5000)
	for name, mk := range everyStore(t) {
		if name == "valkey" {
			continue // the same scripts as goredis; one Redis driver is enough for the time it takes
		}
		t.Run(name, func(t *testing.T) {
			s := mk()
			ctx := context.Background()
			m, _ := primitives.NewMutex(s, "crowd", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(5*time.Minute))
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var (
				served  atomic.Int64
				holders = conformance.NewOccupancy(1)
				wg      sync.WaitGroup
			)
			for range waiters {
				wg.Go(func() {
					l, err := m.Acquire(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					holders.Enter(1)()
					served.Add(1)
					l.Release(ctx)
				})
			}
			// Ten thousand goroutines under the race detector take their places slowly on
			// a loaded machine: the bound is for a stranded waiter, not for speed.
			poll.Within(t, 2*time.Minute, "every waiter in line", func() (int, bool) {
				snap, err := s.Inspect(ctx, "crowd")
				return len(snap.Waiters), err == nil && len(snap.Waiters) == waiters
			})
			start := time.Now()
			l.Release(ctx)
			wg.Wait()
			if v := holders.Violations(); len(v) > 0 {
				t.Errorf("two holders of one mutex, %d times", len(v))
			}
			if served.Load() != int64(waiters) {
				t.Fatalf("%d of %d waiters served", served.Load(), waiters)
			}
			t.Logf("%d waiters served in %v", waiters, time.Since(start).Round(time.Millisecond))
		})
	}
}

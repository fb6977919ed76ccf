package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestBadInputIsRefusedBeforeTheStore(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder()
	var store core.Store = rec
	tests := []struct {
		name string
		call func() error
		want string // the argument the message must name
	}{
		{"nil store", func() error { _, err := primitives.NewMutex(nil, "k"); return err }, "store"},
		{"nil store semaphore", func() error { _, err := primitives.NewSemaphore(nil, "k", 2); return err }, "store"},
		{"empty key", func() error { _, err := primitives.NewMutex(store, ""); return err }, "key"},
		{"limit 0", func() error { _, err := primitives.NewSemaphore(store, "k", 0); return err }, "limit"},
		{"limit -1", func() error { _, err := primitives.NewSemaphore(store, "k", -1); return err }, "limit"},
		{"ttl 0", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithTTL(0)); return err }, "ttl"},
		{"ttl negative", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithTTL(-time.Second)); return err }, "ttl"},
		{"ttl below 1ms", func() error {
			_, err := primitives.NewMutex(store, "k", primitives.WithTTL(time.Microsecond))
			return err
		}, "ttl"},
		{"refresh equal to ttl", func() error {
			_, err := primitives.NewMutex(store, "k", primitives.WithTTL(time.Second), primitives.WithRefreshInterval(time.Second))
			return err
		}, "refresh interval"},
		{"refresh 0", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithRefreshInterval(0)); return err }, "refresh interval"},
		{"retry interval 0", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithRetryInterval(0)); return err }, "retry interval"},
		{"acquire timeout 0", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithAcquireTimeout(0)); return err }, "acquire timeout"},
		{"ttl above MaxDuration", func() error {
			_, err := primitives.NewMutex(store, "k", primitives.WithTTL(math.MaxInt64))
			return err
		}, fmt.Sprintf("ttl %v: must be at most %v", time.Duration(math.MaxInt64), core.MaxDuration)},
		{"ttl just above MaxDuration", func() error {
			_, err := primitives.NewMutex(store, "k", primitives.WithTTL(core.MaxDuration+1))
			return err
		}, fmt.Sprintf("must be at most %v", core.MaxDuration)},
		{"retry interval above MaxDuration", func() error {
			_, err := primitives.NewMutex(store, "k", primitives.WithRetryInterval(math.MaxInt64))
			return err
		}, fmt.Sprintf("retry interval %v: must be at most %v", time.Duration(math.MaxInt64), core.MaxDuration)},
		{"refresh interval above MaxDuration", func() error {
			_, err := primitives.NewMutex(store, "k", primitives.WithRefreshInterval(math.MaxInt64))
			return err
		}, fmt.Sprintf("refresh interval %v: must be at most %v", time.Duration(math.MaxInt64), core.MaxDuration)},
		{"lock delay negative", func() error {
			_, err := primitives.NewMutex(store, "k", primitives.WithLockDelay(-time.Millisecond))
			return err
		}, "lock delay -1ms: must be in [0, "},
		{"lock delay above MaxDuration", func() error {
			_, err := primitives.NewMutex(store, "k", primitives.WithLockDelay(core.MaxDuration+1))
			return err
		}, "lock delay"},
		{"limit above MaxLimit", func() error { _, err := primitives.NewSemaphore(store, "k", core.MaxLimit+1); return err },
			fmt.Sprintf("limit %d: must be at most %d", core.MaxLimit+1, core.MaxLimit)},
		{"limit MaxInt", func() error { _, err := primitives.NewSemaphore(store, "k", math.MaxInt); return err }, "limit"},
		{"attempts 0", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithAttempts(0)); return err }, "attempts"},
		{"nil events func", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithEvents(nil)); return err }, "events"},
		{"nil logger", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithLogger(nil)); return err }, "logger"},
		{"empty holder option", func() error { _, err := primitives.NewMutex(store, "k", primitives.WithHolder("")); return err }, "holder"},
		{"permits 0", func() error {
			s, _ := primitives.NewSemaphore(store, "k", 3)
			_, err := s.Acquire(ctx, 0)
			return err
		}, "permits"},
		{"permits above limit", func() error {
			s, _ := primitives.NewSemaphore(store, "k", 3)
			_, err := s.TryAcquire(ctx, 4)
			return err
		}, "permits"},
		{"adopt empty holder", func() error {
			m, _ := primitives.NewMutex(store, "k")
			_, err := m.Adopt(ctx, "")
			return err
		}, "holder"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, core.ErrInvalid) {
				t.Fatalf("err = %v, want one wrapping ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to name %q", err, tc.want)
			}
			if n := rec.calls(); n != 0 {
				t.Errorf("bad input reached the store: %d calls", n)
			}
		})
	}
}

func TestDefaultOptionsAreValid(t *testing.T) {
	for _, opts := range [][]primitives.Option{
		nil,
		{primitives.WithTTL(10 * time.Millisecond), primitives.WithoutRefresh()},
		{primitives.WithTTL(10 * time.Millisecond)},
		{primitives.WithTTL(time.Second), primitives.WithRefreshInterval(489 * time.Millisecond)},
		{primitives.WithRefreshInterval(time.Second), primitives.WithoutRefresh(), primitives.WithTTL(time.Second)},
		{primitives.WithTTL(core.MaxDuration)},
		{primitives.WithAcquireTimeout(math.MaxInt64), primitives.WithAttempts(math.MaxInt)},
	} {
		if _, err := primitives.NewMutex(newRecorder(), "k", opts...); err != nil {
			t.Errorf("NewMutex with %d options: %v", len(opts), err)
		}
	}
	if _, err := primitives.NewSemaphore(newRecorder(), "k", core.MaxLimit); err != nil {
		t.Errorf("NewSemaphore of core.MaxLimit: %v", err)
	}
}

func TestWithoutRefreshWinsInAnyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		m, err := primitives.NewMutex(rec, "k", primitives.WithoutRefresh(), primitives.WithRefreshInterval(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if n := rec.extends.Load(); n != 0 {
			t.Errorf("%d refreshes with WithoutRefresh given first, want 0", n)
		}
		l.Release(context.Background())
	})
}

func TestLongestTTLAndLargestLimitWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		sem, err := primitives.NewSemaphore(rec, "k", core.MaxLimit, primitives.WithTTL(core.MaxDuration))
		if err != nil {
			t.Fatal(err)
		}
		l, err := sem.Acquire(context.Background(), core.MaxLimit)
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Now().Add(core.MaxDuration - core.MaxDuration/100 - 2*time.Millisecond); !l.Deadline().Equal(want) {
			t.Errorf("Deadline %v, want %v", l.Deadline(), want)
		}
		if _, err := l.Extend(context.Background(), core.MaxDuration); err != nil {
			t.Errorf("Extend(core.MaxDuration): %v", err)
		}
		time.Sleep(time.Hour) // refreshes at TTL/3: none in an hour
		if l.Err() != nil || rec.extends.Load() != 1 {
			t.Errorf("after an hour: Err %v, %d extends; want nil and only ours", l.Err(), rec.extends.Load())
		}
		mustRelease(t, l)
	})
}

// TestNoAcquireTimeoutSendsABoundedWait: WithAcquireTimeout(math.MaxInt64) means no acquire
// timeout, and the Wait a store is told stays positive and at most core.MaxDuration, with or
// without notifications and with a ctx deadline beyond it.
func TestNoAcquireTimeoutSendsABoundedWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		notify   bool
		deadline bool
	}{{"notifier", true, false}, {"no notifier", false, false}, {"far ctx deadline", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				var store core.Store = rec
				if tc.notify {
					store = notifying{rec}
				}
				holder := mustMutex(t, store, primitives.WithTTL(time.Hour))
				m := mustMutex(t, store, primitives.WithAcquireTimeout(math.MaxInt64), primitives.WithRetryInterval(time.Minute))
				l := mustAcquire(t, holder)
				ctx := context.Background()
				if tc.deadline {
					var cancel context.CancelFunc
					ctx, cancel = context.WithDeadline(ctx, time.Now().Add(math.MaxInt64))
					defer cancel()
				}
				got := make(chan core.Lease, 1)
				go func() {
					l, err := m.Acquire(ctx)
					if err != nil {
						t.Error(err)
					}
					got <- l
				}()
				time.Sleep(3 * time.Hour) // the holder refreshes; the waiter has no timeout
				synctest.Wait()
				waits := rec.acquireWaits()[1:] // the holder's acquire asks no Wait
				if len(waits) < 2 {
					t.Fatalf("waiter sent %d acquires, want at least 2", len(waits))
				}
				for i, w := range waits {
					if w <= 0 || w > core.MaxDuration {
						t.Errorf("waiter's acquire %d carried Wait %v, want in (0, %v]", i, w, core.MaxDuration)
					}
				}
				mustRelease(t, l)
				mustRelease(t, <-got)
			})
		})
	}
}

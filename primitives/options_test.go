package primitives_test

import (
	"context"
	"errors"
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
	} {
		if _, err := primitives.NewMutex(newRecorder(), "k", opts...); err != nil {
			t.Errorf("NewMutex with %d options: %v", len(opts), err)
		}
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

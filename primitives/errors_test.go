package primitives_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// TestErrorsNameTheOperationAndKeyOnce pins the whole text of representative errors: the
// primitive names the operation and key once, at the front; a driver adds only what it knows;
// a sentinel's text carries no prefix. Each error still wraps its sentinel.
func TestErrorsNameTheOperationAndKeyOnce(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		err  func(t *testing.T) error
		is   error
		want string
	}{
		{
			name: "NewMutex with an empty key",
			err: func(t *testing.T) error {
				_, err := primitives.NewMutex(memory.New(), "")
				return err
			},
			is:   core.ErrInvalid,
			want: `leasehold: new mutex "": invalid argument: key: must not be empty`,
		},
		{
			name: "Acquire on a closed store",
			err: func(t *testing.T) error {
				store := memory.New()
				store.Close()
				_, err := mustMutex(t, store).Acquire(ctx)
				return err
			},
			is:   core.ErrClosed,
			want: `leasehold: acquire "job": store closed`,
		},
		{
			name: "TryAcquire of a held lock",
			err: func(t *testing.T) error {
				m := mustMutex(t, memory.New())
				l := mustAcquire(t, m)
				defer l.Release(ctx)
				_, err := m.TryAcquire(ctx)
				return err
			},
			is:   core.ErrNotAcquired,
			want: `leasehold: acquire "job": not acquired: busy`,
		},
		{
			name: "Acquire of other permits than the holder holds",
			err: func(t *testing.T) error {
				s := mustSemaphore(t, memory.New(), 3, primitives.WithHolder("h"))
				l, err := s.Acquire(ctx, 2)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(ctx)
				_, err = s.Acquire(ctx, 1)
				return err
			},
			is:   core.ErrInvalid,
			want: `leasehold: acquire "pool": invalid argument: holder already holds 2 permits, asked for 1`,
		},
		{
			name: "Adopt of a holder that holds nothing",
			err: func(t *testing.T) error {
				_, err := mustSemaphore(t, memory.New(), 1).Adopt(ctx, "nobody")
				return err
			},
			is:   core.ErrNotHeld,
			want: `leasehold: adopt "pool": not held`,
		},
		{
			name: "Err of a lease past its deadline",
			err: func(t *testing.T) error {
				var err error
				synctest.Test(t, func(t *testing.T) {
					l := mustAcquire(t, mustMutex(t, memory.New(), primitives.WithoutRefresh()))
					<-l.Done()
					err = l.Err()
				})
				return err
			},
			is:   core.ErrLost,
			want: `leasehold: hold "job": lease lost: deadline passed without a successful refresh`,
		},
		{
			name: "Release of a lease lost at its deadline",
			err: func(t *testing.T) error {
				var err error
				synctest.Test(t, func(t *testing.T) {
					l := mustAcquire(t, mustMutex(t, memory.New(), primitives.WithoutRefresh()))
					<-l.Done()
					err = l.Release(ctx)
				})
				return err
			},
			is:   core.ErrLost,
			want: `leasehold: release "job": lease lost: deadline passed without a successful refresh`,
		},
		{
			// One node, so that every answer is in before the outcome: with more, a node slower
			// than the decision is reported as having no answer yet.
			name: "Acquire over Redlock with too few nodes",
			err: func(t *testing.T) error {
				node := memory.New()
				node.Close()
				rl, err := redlock.New([]core.Store{node})
				if err != nil {
					t.Fatal(err)
				}
				_, err = mustMutex(t, rl).Acquire(ctx)
				return err
			},
			is:   core.ErrClosed,
			want: `leasehold: acquire "job": redlock: 0 of 1 nodes answered, 1 needed: node 0: store closed`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

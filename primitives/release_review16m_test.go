package primitives_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Adversarial review of issue 16 as a whole (review16m): a release whose reply is lost.

// TestRetriedReleaseAfterALostReplyIsNotALoss_review16m: Release fails when its reply is lost,
// and the lease stays (TestFailedReleaseCanBeRetried); the caller retries, and the store says
// the holder holds nothing: its own first release went through. The retry reports the lease
// released, not lost: no error wrapping core.ErrLost, no OnLost, no EventLost. (A Release retried
// after a lost reply is safe, as an Acquire retried after one is.)
func TestRetriedReleaseAfterALostReplyIsNotALoss_review16m(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &primitives.LostReply{Store: memory.New()}
		var lostCalls, lostEvents atomic.Int32
		m := mustMutex(t, s, primitives.WithTTL(3*time.Second),
			primitives.WithOnLost(func(core.Lease, error) { lostCalls.Add(1) }),
			primitives.WithEvents(func(e primitives.Event) {
				if e.Kind == primitives.EventLost {
					lostEvents.Add(1)
				}
			}))
		l := mustAcquire(t, m)
		s.Lose.Store(true)
		if err := l.Release(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Release with its reply lost = %v; want the ctx's error", err)
		}
		s.Lose.Store(false)
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("retried Release after a lost reply = %v; want nil: the lease was released by the first", err)
		}
		synctest.Wait() // OnLost runs on a goroutine of its own
		if lostCalls.Load() != 0 || lostEvents.Load() != 0 {
			t.Errorf("after the retried Release: %d OnLost calls, %d EventLost; want none", lostCalls.Load(), lostEvents.Load())
		}
		select {
		case <-l.Done():
		default:
			t.Error("the released lease's Done is not closed")
		}
		if l.Err() != nil {
			t.Errorf("the released lease's Err = %v; want nil, as after a clean Release", l.Err())
		}
	})
}

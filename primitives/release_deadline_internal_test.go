package primitives

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// LostReply is a store whose Release, while Lose is set, releases and then reports the caller's
// ctx's end instead of the reply, as a driver does when ctx's deadline strikes after the script
// ran (go-redis's call goroutine, valkey-go's cut-off reply). Exported for the package's
// external tests.
type LostReply struct {
	*memory.Store
	Lose atomic.Bool
}

func (s *LostReply) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	held, err := s.Store.Release(context.WithoutCancel(ctx), req)
	if s.Lose.Load() {
		return false, context.DeadlineExceeded
	}
	return held, err
}

// TestReleaseAfterTheDeadlineWithItsReplyLostIsALoss: a Release called once the lease's
// deadline has passed, before its timer has declared the lease lost (the two race), ended a
// critical section the lease no longer protected. When its reply is lost and a retry finds
// nothing held, the retry reports the loss, as a Release that found nothing at once would; only
// a failed Release called in time makes a retry that finds nothing a release.
func TestReleaseAfterTheDeadlineWithItsReplyLostIsALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &LostReply{Store: memory.New()}
		m, err := NewMutex(s, "k", WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		l := got.(*lease)
		// The deadline passes, and the timer has not run yet: the instant the race leaves.
		l.mu.Lock()
		l.timer.Stop()
		l.deadline = time.Now().Add(-time.Nanosecond)
		l.mu.Unlock()
		s.Lose.Store(true)
		if err := l.Release(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Release with its reply lost = %v; want the ctx's error", err)
		}
		s.Lose.Store(false)
		if err := l.Release(context.Background()); !errors.Is(err, core.ErrLost) {
			t.Errorf("retried Release, the first called after the deadline = %v; want ErrLost", err)
		}
		synctest.Wait()
	})
}

package memory_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// TestFencedWritesRefuseAStaleFence: a write with the current fence runs, one with an older
// fence is refused and does not run, the same fence runs again, and a failed write records
// nothing.
func TestFencedWritesRefuseAStaleFence(t *testing.T) {
	s := memory.New()
	ctx := context.Background()
	var log []string
	boom := errors.New("boom")
	for _, step := range []struct {
		fence uint64
		value string
		fail  bool
		stale bool
	}{{5, "a", false, false}, {3, "b", false, true}, {5, "c", false, false}, {9, "d", true, false}, {7, "e", false, false}, {6, "f", false, true}} {
		err := s.Fenced(ctx, "account-7", step.fence, func() error {
			if step.fail {
				return boom
			}
			log = append(log, step.value)
			return nil
		})
		switch {
		case step.stale:
			if !errors.Is(err, core.ErrStaleFence) || !errors.Is(err, core.ErrLost) {
				t.Fatalf("write %s with fence %d: %v, want ErrStaleFence and ErrLost", step.value, step.fence, err)
			}
		case step.fail:
			if err != boom {
				t.Fatalf("write %s: %v, want fn's error as it is", step.value, err)
			}
		case err != nil:
			t.Fatalf("write %s with fence %d: %v", step.value, step.fence, err)
		}
	}
	// fence 9 failed, so 7 is still above the highest recorded (5).
	if want := []string{"a", "c", "e"}; !slices.Equal(log, want) {
		t.Errorf("writes %v, want %v", log, want)
	}
	for _, f := range []uint64{0, 1 << 63} { // the range the Redis and PostgreSQL stores take: [1, 2^63 − 1]
		if err := s.Fenced(ctx, "r", f, func() error { t.Errorf("fn ran with fence %d", f); return nil }); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("fence %d: %v, want ErrInvalid", f, err)
		}
	}
}

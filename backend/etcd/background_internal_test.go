package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
)

// TestLeaveOwedOnceTheBackgroundEndedHoldsUpNoTry: an operation in flight when the Store's
// background work ended (the Store closed, or its client) fails and owes a leave that can no
// longer run. The holder's next try and an Inspect of the key, also in flight, must not wait
// for that leave until their contexts end.
func TestLeaveOwedOnceTheBackgroundEndedHoldsUpNoTry(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"store closed", "client closed"} {
		t.Run(end, func(t *testing.T) {
			c := etcdtest.Shared(t).Client(t)
			s, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if end == "store closed" {
				s.Close()
			} else {
				c.Close()
			}
			key := fmt.Sprint(t.Name(), rand.Int64())
			s.leaveAfterError(key, "h") // a try with a Wait failed after the end
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			if err := s.waitHolderLeaving(ctx, key, "h"); err != nil {
				t.Errorf("the holder's next try waited for a leave that never runs: %v", err)
			}
			if err := s.waitLeaving(ctx, key); err != nil {
				t.Errorf("Inspect waited for a leave that never runs: %v", err)
			}
		})
	}
}

package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
)

// TestOtherCallersDeadlineDoesNotFailACall: valkey-go dials a connection when a call first needs
// it, under that call's ctx, and the calls waiting for the same connection get that dial's
// error. On a fresh client, calls with a deadline too short for a dial start beside calls with
// no deadline at all: every call without a deadline succeeds (before the fix, some failed with
// "dial tcp: i/o timeout" or context.DeadlineExceeded, and a Release that failed so left the
// lock held until its TTL).
func TestOtherCallersDeadlineDoesNotFailACall(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for round := range 5 {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := valkey.New(c)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				key := fmt.Sprint("dial-", round, "-", i)
				req := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
				if i%2 == 0 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Microsecond)
					defer cancel()
					if _, err := s.Acquire(ctx, req); err != nil && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Acquire with a 1 µs deadline: %v, want success or context.DeadlineExceeded", err)
					}
					return
				}
				if res, err := s.Acquire(context.Background(), req); err != nil || !res.Granted {
					t.Errorf("round %d: Acquire without a deadline beside callers with short ones: %+v, %v", round, res, err)
					return
				}
				if held, err := s.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h"}); err != nil || !held {
					t.Errorf("round %d: Release without a deadline: %v, %v", round, held, err)
				}
			})
		}
		wg.Wait()
		s.Close()
		c.Close()
	}
}

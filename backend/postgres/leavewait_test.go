package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestInspectWaitsForALeaveHeldUpPastTheSharedBudget: a waiter gives up while another
// transaction holds its key's row for longer than waitline's default leave budget; Inspect,
// called at once, waits for the whole leave (its budget is the Store's) and does not list the
// place that gave up.
func TestInspectWaitsForALeaveHeldUpPastTheSharedBudget(t *testing.T) {
	testenv.SkipShort(t, "holds a row for 2.5 s")
	t.Parallel()
	url := serverURL(t)
	s := newStore(t, url)
	ctx := context.Background()
	key := uniqueKey(t)
	w := waiterBehindHolder(t, s, key)
	tx, err := newPool(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM leasehold_keys WHERE kh = sha256($1) FOR UPDATE", []byte(key)); err != nil {
		tx.Rollback(ctx)
		t.Fatal(err)
	}
	// The row is held past the default budget of 2 s, then freed: the fault's schedule. The
	// transaction is the timer's alone from here on.
	freed := make(chan struct{})
	time.AfterFunc(2500*time.Millisecond, func() { tx.Rollback(context.Background()); close(freed) })
	t.Cleanup(func() { <-freed })
	w.Close()
	snap, err := s.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, wi := range snap.Waiters {
		if wi.Holder == "w" {
			t.Fatalf("Inspect after the waiter gave up lists it: %+v", snap.Waiters)
		}
	}
}

// waiterBehindHolder has holder h take key's one permit and w wait behind it, enrolled: it
// returns w's wake.
func waiterBehindHolder(t *testing.T, s *postgres.Store, key string) core.Wake {
	t.Helper()
	ctx := context.Background()
	hold := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
	if res, err := s.Acquire(ctx, hold); err != nil || !res.Granted {
		t.Fatalf("Acquire(h) = %+v, %v", res, err)
	}
	wr := hold
	wr.Holder, wr.Wait = "w", time.Minute
	if res, err := s.Acquire(ctx, wr); err != nil || res.Granted {
		t.Fatalf("Acquire(w) = %+v, %v; want refused", res, err)
	}
	w, err := s.Register(ctx, wr)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

package postgres_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestDeadWaitersArePassedOver: a process with 10 goroutines waiting in line (TTL 30s, acquire
// timeout 10 min) is killed; the holder releases; a live waiter behind them has the lock at once
// (within 10s, however loaded the machine), not after the dead waiters' TTLs of 30s: the line
// finds their Store's listening backend gone.
func TestDeadWaitersArePassedOver(t *testing.T) {
	testenv.SkipShort(t, "starts and kills a process of waiters")
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	m, _ := primitives.NewMutex(newStore(t, url), key, primitives.WithTTL(30*time.Second))
	held, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestHelperDeadWaiters$", "-test.count=1")
	child.Env = append(os.Environ(), "LEASEHOLD_DEAD_WAITERS="+url, "LEASEHOLD_DEAD_KEY="+key)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { child.Wait(); close(exited) }()
	t.Cleanup(func() { child.Process.Kill(); <-exited })
	inspector := newStore(t, url)
	lineLen := func() int {
		snap, err := inspector.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return len(snap.Waiters)
	}
	poll.Until(t, "the child's ten waiters in line", func() bool { return lineLen() == 10 })
	live, _ := primitives.NewMutex(newStore(t, url), key, primitives.WithTTL(30*time.Second), primitives.WithAcquireTimeout(10*time.Minute))
	got := make(chan core.Lease, 1)
	go func() {
		l, err := live.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	poll.Until(t, "the live waiter in line behind them", func() bool { return lineLen() == 11 })
	child.Process.Kill()
	<-exited
	admin := newPool(t, url)
	poll.Until(t, "the server to see the dead process's listening connection close", func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM leasehold_waiters w JOIN pg_stat_activity a ON a.pid = w.pid
			WHERE w.kh = sha256($1)`, []byte(key)).Scan(&n)
		return err == nil && n == 1 // the live waiter's
	})
	start := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		t.Logf("a live waiter behind 10 dead ones had the lock %v after the release", time.Since(start))
		if l != nil {
			l.Release(ctx)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the live waiter did not have the lock within 10s of the release; line %d", lineLen())
	}
}

// TestHelperDeadWaiters is the process TestDeadWaitersArePassedOver kills: ten goroutines
// waiting for the lock.
func TestHelperDeadWaiters(t *testing.T) {
	url := os.Getenv("LEASEHOLD_DEAD_WAITERS")
	if url == "" {
		t.Skip("run by TestDeadWaitersArePassedOver")
	}
	s := newStore(t, url)
	m, _ := primitives.NewMutex(s, os.Getenv("LEASEHOLD_DEAD_KEY"), primitives.WithTTL(30*time.Second), primitives.WithAcquireTimeout(10*time.Minute))
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, err := m.Acquire(context.Background())
			if err != nil && !errors.Is(err, core.ErrClosed) {
				t.Error(err)
			}
		})
	}
	wg.Wait() // killed before
}

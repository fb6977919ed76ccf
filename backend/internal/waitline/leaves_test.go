package waitline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var errDown = errors.New("server down")

// TestLeaveIsSentAgainUntilAnswered: a leave whose sends fail is sent again, with a growing
// pause, until one is answered; the holder's next call and Inspect wait for it, Close does not
// wait longer.
func TestLeaveIsSentAgainUntilAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ls := NewLeaves(context.Background())
		var sends atomic.Int32
		after := false
		ls.Start(Leave{Key: "k", Holder: "h", Send: func(context.Context) error {
			if sends.Add(1) < 5 {
				return errDown
			}
			return nil
		}, After: func() { after = true }})
		start := time.Now()
		if err := ls.AwaitHolder(context.Background(), "k", "h"); err != nil {
			t.Fatal(err)
		}
		if n, took := sends.Load(), time.Since(start); n != 5 || took != (10+20+40+80)*time.Millisecond || !after {
			t.Fatalf("%d sends in %v, after ran %v; want 5 in 150ms, then After", n, took, after)
		}
		if ls.Pending() {
			t.Fatal("pending after its end")
		}
		ls.Close(context.Background())
	})
}

// TestLeaveGivesUpAtItsBudget: a leave that is never answered (its sends fail, or hang) ends
// LeaveBudget after it started, and the calls waiting for it go on.
func TestLeaveGivesUpAtItsBudget(t *testing.T) {
	for name, send := range map[string]func(ctx context.Context) error{
		"failing": func(context.Context) error { return errDown },
		"hanging": func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ls := NewLeaves(context.Background())
				ls.Start(Leave{Key: "k", Holder: "h", Send: send})
				start := time.Now()
				if err := ls.AwaitKey(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
				if took := time.Since(start); took < LeaveBudget || took > LeaveBudget+time.Second {
					t.Fatalf("gave up after %v; want LeaveBudget (%v)", took, LeaveBudget)
				}
				ls.Close(context.Background())
			})
		})
	}
}

// TestAwaitsAreByKeyAndByHolder: a holder's calls wait for its own leaves of the key, not for
// another holder's or another key's; Inspect of the key waits for every holder's; each wait
// ends with its ctx.
func TestAwaitsAreByKeyAndByHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ls := NewLeaves(context.Background())
		release := make(chan struct{})
		ls.Start(Leave{Key: "k", Holder: "a", Send: func(context.Context) error { <-release; return nil }})
		ctx := context.Background()
		if err := ls.AwaitHolder(ctx, "k", "b"); err != nil {
			t.Fatal(err)
		}
		if err := ls.AwaitKey(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		go func() {
			if err := ls.AwaitHolder(short, "k", "a"); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a's wait = %v; want its ctx's deadline", err)
			}
		}()
		synctest.Wait()
		if n := ls.Awaiting("k", "a"); n != 1 {
			t.Fatalf("%d awaiting a's leave; want 1", n)
		}
		if err := ls.AwaitKey(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Inspect's wait = %v; want its ctx's deadline", err)
		}
		close(release)
		if err := ls.AwaitKey(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		ls.Close(ctx)
	})
}

// TestCloseWaitsForStartedLeavesWithinItsCtx: Close waits for the leaves started before it,
// until its ctx ends, then cuts them off and returns once they have ended; no leave starts after
// it, nor after the parent context ends.
func TestCloseWaitsForStartedLeavesWithinItsCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ls := NewLeaves(context.Background())
		var answered, cut atomic.Bool
		ls.Start(Leave{Key: "k", Holder: "quick", Send: func(ctx context.Context) error {
			time.Sleep(time.Second)
			answered.Store(true)
			return nil
		}})
		ls.Start(Leave{Key: "k", Holder: "hung", Send: func(ctx context.Context) error {
			<-ctx.Done()
			cut.Store(true)
			return ctx.Err()
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		ls.Close(ctx)
		if took := time.Since(start); took != 2*time.Second || !answered.Load() || !cut.Load() || ls.Pending() {
			t.Fatalf("Close took %v, quick answered %v, hung cut %v; want 2s, both ended", took, answered.Load(), cut.Load())
		}
		if ls.Start(Leave{Key: "k", Holder: "late", Send: func(context.Context) error { return nil }}) {
			t.Fatal("a leave started after Close")
		}
		parent, stop := context.WithCancel(context.Background())
		other := NewLeaves(parent)
		stop()
		if other.Start(Leave{Key: "k", Holder: "h", Send: func(context.Context) error { return nil }}) {
			t.Fatal("a leave started after the parent context ended")
		}
	})
}

// TestAwaitEndsWithTheLeavesStartedBeforeIt: a wait for a key's leaves, or a holder's, ends when
// the leaves started before it have ended, though others started since are still running: a
// key whose waiters keep giving up does not hold Inspect, or a shared holder's next call, for
// as long as they do.
func TestAwaitEndsWithTheLeavesStartedBeforeIt(t *testing.T) {
	for name, await := range map[string]func(ls *Leaves) error{
		"key":    func(ls *Leaves) error { return ls.AwaitKey(context.Background(), "k") },
		"holder": func(ls *Leaves) error { return ls.AwaitHolder(context.Background(), "k", "h") },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ls := NewLeaves(context.Background())
				first, second := make(chan struct{}), make(chan struct{})
				blocked := func(c chan struct{}) func(context.Context) error {
					return func(context.Context) error { <-c; return nil }
				}
				ls.Start(Leave{Key: "k", Holder: "h", Send: blocked(first)})
				returned := make(chan error, 1)
				go func() { returned <- await(ls) }()
				synctest.Wait()
				ls.Start(Leave{Key: "k", Holder: "h", Send: blocked(second)})
				close(first)
				synctest.Wait()
				select {
				case err := <-returned:
					if err != nil {
						t.Fatal(err)
					}
				default:
					t.Fatal("the wait still runs after the leaves started before it ended")
				}
				close(second)
				if err := await(ls); err != nil {
					t.Fatal(err)
				}
				if ls.Pending() {
					t.Fatal("pending after every leave ended")
				}
				ls.Close(context.Background())
			})
		})
	}
}

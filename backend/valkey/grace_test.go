package valkey_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
)

// TestGraceCtxDoneErrAndEndRace: Done, Err and Deadline called from several goroutines
// while the caller's ctx is canceled and end runs, with a grace short enough that the timer
// fires in the middle: no data race (-race), no panic, Err non-nil whenever Done is seen
// closed, and nothing left running afterwards.
func TestGraceCtxDoneErrAndEndRace(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	defer valkey.SetCancelGrace(time.Microsecond)()
	for i := range 2000 {
		ctx, cancel := context.WithCancel(context.Background())
		g, end := valkey.NewGraceCtx(ctx)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for range 3 {
					select {
					case <-g.Done():
						if g.Err() == nil {
							t.Error("Done closed and Err nil")
						}
					default:
					}
					if dl, ok := g.Deadline(); !ok || dl.Year() != 9999 {
						t.Errorf("Deadline = %v, %v", dl, ok)
					}
				}
			})
		}
		switch i % 3 {
		case 0:
			wg.Go(cancel)
			wg.Go(end)
		case 1:
			cancel()
			wg.Go(end)
		default:
			wg.Go(end)
			cancel()
		}
		wg.Wait()
		_ = g.Err()
	}
}

// TestGraceCtxErrNilUntilDoneCloses: a goroutine that sees Done close always sees Err
// non-nil, and Err is the caller's ctx's error; before the grace ends Err is nil and
// context.Cause is nil (so a child made with WithCancelCause is not canceled early). The
// graceCtx tests that time the grace run in synctest bubbles: a loaded machine's stall cannot
// end a grace early, or make a timer fire before end stops it.
func TestGraceCtxErrNilUntilDoneCloses(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		cause := errors.New("caller's cause")
		for _, grace := range []time.Duration{time.Nanosecond, 200 * time.Millisecond} {
			restore := valkey.SetCancelGrace(grace)
			ctx, cancel := context.WithCancelCause(context.Background())
			g, end := valkey.NewGraceCtx(ctx)
			done := g.Done()
			child, childCancel := context.WithCancel(g) // the parentCancelCtx trap: g's Value is ctx's
			cancel(cause)
			if grace > time.Millisecond {
				time.Sleep(grace / 4)
				if err := g.Err(); err != nil {
					t.Errorf("grace %v: Err = %v inside the grace, want nil", grace, err)
				}
				if err := context.Cause(g); err != nil {
					t.Errorf("grace %v: Cause = %v inside the grace, want nil", grace, err)
				}
				if child.Err() != nil {
					t.Errorf("grace %v: a child of the graceCtx ended with the caller's ctx: %v", grace, child.Err())
				}
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("grace %v: Done not closed 5 s after the caller's ctx ended", grace)
			}
			if err := g.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("grace %v: Err after Done = %v, want Canceled", grace, err)
			}
			if err := context.Cause(g); err != cause {
				t.Errorf("grace %v: Cause after Done = %v, want the caller's", grace, err)
			}
			<-child.Done()
			if err := context.Cause(child); err != cause {
				t.Errorf("grace %v: child's Cause = %v, want the caller's", grace, err)
			}
			childCancel()
			end()
			restore()
		}
	})
}

type ctxKey struct{}

// TestGraceCtxCarriesTheCallersValues: the graceCtx carries the caller's values.
func TestGraceCtxCarriesTheCallersValues(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancel()
	g, end := valkey.NewGraceCtx(ctx)
	defer end()
	if v := g.Value(ctxKey{}); v != "v" {
		t.Fatalf("Value = %v, want the caller's", v)
	}
}

// TestGraceCtxAlreadyEnded: when Done is first asked after the caller's ctx has ended,
// the channel still closes (the grace counts from that first Done), and Err is nil until then.
func TestGraceCtxAlreadyEnded(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		defer valkey.SetCancelGrace(200 * time.Millisecond)()
		ctx, cancel := context.WithCancel(context.Background())
		g, end := valkey.NewGraceCtx(ctx)
		defer end()
		cancel()
		time.Sleep(300 * time.Millisecond) // longer than the grace: with no Done asked, nothing runs
		if err := g.Err(); err != nil {
			t.Fatalf("Err before Done was asked = %v, want nil", err)
		}
		start := time.Now()
		select {
		case <-g.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done asked after the caller's ctx ended never closed")
		}
		d := time.Since(start)
		t.Logf("Done closed %v after it was first asked (ctx ended 300 ms before)", d.Round(time.Millisecond))
		if d < 150*time.Millisecond {
			t.Errorf("Done closed %v after first asked; the grace (200 ms) counts from then", d)
		}
		if g.Err() == nil {
			t.Error("Err nil after Done closed")
		}
	})
}

// TestGraceCtxDoneAfterEnd: Done asked after end (Run has returned) starts no watch and
// no timer: nothing left running, Err stays nil; end after a started grace stops its timer.
func TestGraceCtxDoneAfterEnd(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		defer valkey.SetCancelGrace(50 * time.Millisecond)()
		ctx, cancel := context.WithCancel(context.Background())
		g, end := valkey.NewGraceCtx(ctx)
		end()
		done := g.Done()
		cancel()
		time.Sleep(150 * time.Millisecond)
		select {
		case <-done:
			t.Error("Done closed after end")
		default:
		}
		if g.Err() != nil {
			t.Error("Err non-nil after end with Done open")
		}

		ctx2, cancel2 := context.WithCancel(context.Background())
		g2, end2 := valkey.NewGraceCtx(ctx2)
		g2.Done()
		cancel2()
		time.Sleep(10 * time.Millisecond) // the grace's timer is running
		end2()
		time.Sleep(100 * time.Millisecond)
		if g2.Err() != nil {
			t.Error("the grace's timer fired after end")
		}
	})
}

// customCtx is a cancelable ctx that is not one of package context's: context.AfterFunc
// watches it with a goroutine of its own.
type customCtx struct {
	context.Context
	done chan struct{}
}

func (c *customCtx) Done() <-chan struct{} { return c.done }
func (c *customCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// TestGraceCtxEndStopsWatchOfCustomCtx: with a caller's ctx that never ends and is not
// package context's own, end stops the watch Done set up: no goroutine stays behind.
func TestGraceCtxEndStopsWatchOfCustomCtx(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := &customCtx{Context: context.Background(), done: make(chan struct{})}
	for range 100 {
		g, end := valkey.NewGraceCtx(ctx)
		g.Done()
		end()
	}
}

// TestValkeyGoEndsACancelableCallWithoutDeadlineAtItsCancel pins what graceCtx is for: valkey-go
// sends a call whose ctx can be canceled but has no deadline through its connection's background
// pipeline, which returns the call's error as soon as ctx is canceled, not at ConnWriteTimeout as
// its synchronous path does (graceCtx, with its deadline, steers calls onto that path; see
// TestCancelableCallStaysSynchronous for the other half). Should valkey-go send such a call
// synchronously itself, this fails, and graceCtx is to be measured again against it.
func TestValkeyGoEndsACancelableCallWithoutDeadlineAtItsCancel(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	const writeTimeout = 5 * time.Second
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{proxy.Addr}, DisableCache: true, PipelineMultiplex: -1,
		ConnWriteTimeout: writeTimeout, Dialer: net.Dialer{KeepAlive: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Do(context.Background(), c.B().Ping().Build()).Error(); err != nil { // the connection, ready
		t.Fatal(err)
	}
	arrived, deliver := proxy.HoldRequest("ECHO")
	defer deliver()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Do(ctx, c.B().Echo().Message("held").Build()).Error() }()
	<-arrived
	canceled := time.Now()
	cancel()
	err = <-done
	if waited := time.Since(canceled); !errors.Is(err, context.Canceled) || waited >= writeTimeout {
		t.Fatalf("a call canceled on the wire returned %v after %v; want context.Canceled before ConnWriteTimeout (%v)", err, waited, writeTimeout)
	}
}

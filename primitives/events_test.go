package primitives_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

type eventLog struct {
	mu sync.Mutex
	ev []primitives.Event
}

func (e *eventLog) add(ev primitives.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *eventLog) kinds() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var k []string
	for _, ev := range e.ev {
		k = append(k, ev.Kind.String())
	}
	return k
}

func TestEventsTellTheLeaseLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log eventLog
		store := memory.New()
		m := mustMutex(t, store, primitives.WithTTL(3*time.Second), primitives.WithEvents(log.add), primitives.WithAcquireTimeout(time.Second))
		l := mustAcquire(t, m)
		time.Sleep(2500 * time.Millisecond) // refreshes at 1s and 2s
		m.Acquire(context.Background())     // refused after the acquire timeout; a refresh at 3s
		mustRelease(t, l)
		l2 := mustAcquire(t, m)
		store.Release(context.Background(), core.ReleaseRequest{Key: "job", Holder: l2.Holder()})
		<-l2.Done()
		synctest.Wait() // the lost event follows Done
		want := "acquired refreshed refreshed waiting refreshed refused released acquired lost"
		if got := strings.Join(log.kinds(), " "); got != want {
			t.Errorf("events %q, want %q", got, want)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if e := log.ev[5]; e.Wait != time.Second || e.Err == nil || !e.Waited {
			t.Errorf("refused event %+v, want a 1s wait, an error, and Waited", e)
		}
		if e := log.ev[6]; e.Held != 3500*time.Millisecond || e.Fence != l.Fence() || e.Lease != l {
			t.Errorf("released event %+v, want held 3.5s with fence %d", e, l.Fence())
		}
	})
}

func TestWithLoggerLogsEvents(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := mustMutex(t, memory.New(), primitives.WithLogger(logger))
	l := mustAcquire(t, m)
	m.TryAcquire(t.Context())
	mustRelease(t, l)
	out := buf.String()
	for _, want := range []string{"lease acquired", "lease refused", "lease released", "key=job", "fence="} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestRefreshFailuresAreLoggedOncePerRun: a run of failed refreshes is one Warn record naming
// the error, and its end one Info record; the events say the same, so that exporters see it.
func TestRefreshFailuresAreLoggedOncePerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		var log eventLog
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second), primitives.WithStopMargin(0), primitives.WithLogger(logger), primitives.WithEvents(log.add))
		l := mustAcquire(t, m)
		for range 2 { // two runs of failures, each survived
			rec.failExtends(errNetwork)
			before := rec.extends.Load()
			time.Sleep(2 * time.Second)
			if n := rec.extends.Load() - before; n < 2 {
				t.Fatalf("%d refreshes failed in the run, want several", n)
			}
			rec.failExtends(nil)
			time.Sleep(2 * time.Second)
		}
		mustRelease(t, l)
		out := buf.String()
		if n := strings.Count(out, "level=WARN msg=\"leasehold: lease refresh failed\""); n != 2 {
			t.Errorf("%d Warn records of failed refreshes, want 2 (one per run):\n%s", n, out)
		}
		if n := strings.Count(out, "level=INFO msg=\"leasehold: lease refresh recovered\""); n != 2 {
			t.Errorf("%d Info records of recoveries, want 2:\n%s", n, out)
		}
		if !strings.Contains(out, `err="leasehold: refresh \"job\": network unreachable"`) {
			t.Errorf("the Warn record does not name the error:\n%s", out)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		failed := 0
		for _, e := range log.ev {
			if e.Kind == primitives.EventRefreshFailed {
				failed++
				if !errors.Is(e.Err, errNetwork) || e.Lease != l {
					t.Errorf("refresh failed event %+v, want the store's error and the lease", e)
				}
			}
		}
		if failed != 2 {
			t.Errorf("%d refresh failed events, want 2", failed)
		}
	})
}

type ctxKey struct{}

// TestEventsCarryTheCallersContext: the events of an acquire carry its ctx, those of a release
// the release's, and those of the held lease the acquire's values without its cancellation.
func TestEventsCarryTheCallersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log eventLog
		rec := newRecorder()
		m := mustMutex(t, rec, primitives.WithTTL(3*time.Second), primitives.WithEvents(log.add))
		actx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "acquire"))
		l, err := m.Acquire(actx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		rec.failExtends(errNetwork)
		time.Sleep(1500 * time.Millisecond) // a refresh fails
		rec.failExtends(nil)
		rec.failReleases(errNetwork)
		rctx := context.WithValue(context.Background(), ctxKey{}, "release")
		if err := l.Release(rctx); err == nil {
			t.Fatal("Release succeeded on a failing store")
		}
		rec.failReleases(nil)
		if err := l.Release(rctx); err != nil {
			t.Fatal(err)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		want := map[primitives.EventKind]string{
			primitives.EventAcquired: "acquire", primitives.EventRefreshFailed: "acquire",
			primitives.EventReleaseFailed: "release", primitives.EventReleased: "release",
		}
		for _, e := range log.ev {
			if w, ok := want[e.Kind]; ok {
				delete(want, e.Kind)
				if got, _ := e.Context.Value(ctxKey{}).(string); got != w {
					t.Errorf("%v event's ctx is %q's, want %q's", e.Kind, got, w)
				}
				if e.Kind == primitives.EventRefreshFailed && e.Context.Err() != nil {
					t.Errorf("the lease's events carry the acquire's cancellation: %v", e.Context.Err())
				}
			}
		}
		if len(want) != 0 {
			t.Errorf("no events of kinds %v", want)
		}
	})
}

// failingAcquire is a store whose Acquire fails.
type failingAcquire struct{ *recorder }

func (failingAcquire) Acquire(context.Context, core.AcquireRequest) (core.AcquireResult, error) {
	return core.AcquireResult{}, errNetwork
}

// TestFailedAcquireIsAnEvent: an acquire that fails on the store, not by refusal, is reported
// with its error and its ctx.
func TestFailedAcquireIsAnEvent(t *testing.T) {
	var log eventLog
	m := mustMutex(t, failingAcquire{newRecorder()}, primitives.WithEvents(log.add))
	ctx := context.WithValue(t.Context(), ctxKey{}, "acquire")
	if _, err := m.Acquire(ctx); !errors.Is(err, errNetwork) {
		t.Fatalf("Acquire = %v, want the store's error", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.ev) != 1 || log.ev[0].Kind != primitives.EventAcquireFailed || !errors.Is(log.ev[0].Err, errNetwork) ||
		log.ev[0].Context.Value(ctxKey{}) != "acquire" || log.ev[0].Lease != nil {
		t.Errorf("events %+v, want one acquire failed with the store's error and the ctx", log.ev)
	}
}

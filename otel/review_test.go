package leaseotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	leaseotel "github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/primitives"
)

// TestKeyAttributeAlsoHidesTheKeyInStatus: a lost lease's status description names the key; with
// WithKeyAttribute the raw key must not reach the span by that way either.
func TestKeyAttributeAlsoHidesTheKeyInStatus(t *testing.T) {
	r := newRecorder(t, leaseotel.WithKeyAttribute(func(string) string { return "" }))
	store := memory.New()
	m, err := primitives.NewMutex(store, "invoice:1234", r.tel.Option())
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	store.Release(t.Context(), core.ReleaseRequest{Key: l.Key(), Holder: l.Holder(), Fence: l.Fence()})
	if err := l.Release(t.Context()); !errors.Is(err, core.ErrLost) {
		t.Fatalf("Release = %v, want ErrLost", err)
	}
	hold := r.span(t, leaseotel.HoldSpan)
	if strings.Contains(fmt.Sprint(hold.Status, hold.Attributes, hold.Events), "1234") {
		t.Errorf("hold span records the raw key: status %v, attributes %v", hold.Status, hold.Attributes)
	}
	if hold.Status.Description == "" {
		t.Error("hold span of a lost lease has no description")
	}
}

// TestNilTelemetryOption: the Option of a nil Telemetry (New failed, its error ignored) makes
// NewMutex fail, rather than panicking on a lease's timer goroutine at the first event.
func TestNilTelemetryOption(t *testing.T) {
	var tel *leaseotel.Telemetry
	m, err := primitives.NewMutex(memory.New(), "job", tel.Option())
	if !errors.Is(err, core.ErrInvalid) {
		if m != nil {
			if l, err := m.Acquire(t.Context()); err == nil {
				l.Release(t.Context())
			}
		}
		t.Fatalf("NewMutex with a nil Telemetry's Option = %v, want ErrInvalid", err)
	}
}

// countSpans counts the spans started and ended.
type countSpans struct {
	mu           sync.Mutex
	started, end int
}

func (c *countSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {
	c.mu.Lock()
	c.started++
	c.mu.Unlock()
}
func (c *countSpans) OnEnd(sdktrace.ReadOnlySpan)      { c.mu.Lock(); c.end++; c.mu.Unlock() }
func (c *countSpans) Shutdown(context.Context) error   { return nil }
func (c *countSpans) ForceFlush(context.Context) error { return nil }

// TestManyConcurrentLeases: events from many goroutines and timers at once (run with -race), in
// a bubble so that holding a lease costs no real time. Metrics without WithKeyAttribute stay at
// one series per outcome however many keys there are, and no span is left unended, even for
// leases still held.
func TestManyConcurrentLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		store := memory.New()
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, err := primitives.NewMutex(store, fmt.Sprintf("key:%d", i), r.tel.Option(), primitives.WithTTL(30*time.Millisecond))
				if err != nil {
					t.Error(err)
					return
				}
				for range 5 {
					l, err := m.Acquire(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					time.Sleep(15 * time.Millisecond) // fake time: held across a refresh
					l.Release(context.Background())
				}
			}()
		}
		wg.Wait()
		counts := r.counts(t)
		if counts["leasehold.outcome=acquired"] != 250 || counts["leasehold.outcome=released"] != 250 || counts["leasehold.outcome=refreshed"] < 250 {
			t.Errorf("events %v, want 250 acquired and released, and a refresh of each lease at least", counts)
		}
		for k := range counts {
			if strings.Contains(k, "key") {
				t.Errorf("metric series %s carries the key", k)
			}
		}
		if n := len(r.spans.GetSpans()); n != 500 {
			t.Errorf("%d spans, want 500", n)
		}

		// A lease still held has no span open.
		c := &countSpans{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(c))
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
		tel, err := leaseotel.New(leaseotel.WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		m, err := primitives.NewMutex(store, "held", tel.Option())
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.started != c.end {
			t.Errorf("%d spans started, %d ended", c.started, c.end)
		}
	})
}

// TestTypedNilProvider: a typed nil provider is refused, not a panic.
func TestTypedNilProvider(t *testing.T) {
	var tp *sdktrace.TracerProvider
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("New with a typed nil TracerProvider panicked: %v", p)
		}
	}()
	if _, err := leaseotel.New(leaseotel.WithTracerProvider(tp)); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("New = %v, want ErrInvalid", err)
	}
}

// failingRelease is a Store whose Release fails, as a store that is down would.
type failingRelease struct{ core.Store }

var errDown = errors.New("store down")

func (failingRelease) Release(context.Context, core.ReleaseRequest) (bool, error) {
	return false, errDown
}

// TestFailedReleaseIsRecordedAsLost: a lease whose Release failed is not refreshed, ends at its
// deadline, and is then recorded as lost: one hold span, not none and not two.
func TestFailedReleaseIsRecordedAsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		m, err := primitives.NewMutex(failingRelease{memory.New()}, "job", r.tel.Option(), primitives.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); !errors.Is(err, errDown) {
			t.Fatalf("Release = %v, want the store's error", err)
		}
		<-l.Done()
		synctest.Wait()
		if got := r.counts(t); got["leasehold.outcome=lost"] != 1 || got["leasehold.outcome=released"] != 0 {
			t.Errorf("events %v, want one lost and no released", got)
		}
		hold := r.span(t, leaseotel.HoldSpan)
		if hold.Status.Code != codes.Error || hold.EndTime.Sub(hold.StartTime) <= 0 {
			t.Errorf("hold span %v lasting %v, want an Error of positive extent", hold.Status, hold.EndTime.Sub(hold.StartTime))
		}
	})
}

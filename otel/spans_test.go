package leaseotel_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	leaseotel "github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/primitives"
)

// checkParent checks that s is a child of the span of ctx.
func checkParent(t *testing.T, s tracetest.SpanStub, ctx context.Context) {
	t.Helper()
	want := trace.SpanContextFromContext(ctx)
	if s.Parent.SpanID() != want.SpanID() || s.SpanContext.TraceID() != want.TraceID() {
		t.Errorf("span %s has parent %v in trace %v, want %v in %v", s.Name, s.Parent.SpanID(), s.SpanContext.TraceID(), want.SpanID(), want.TraceID())
	}
}

// spansNamed returns the spans named name, in the order they ended.
func (r *recorder) spansNamed(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range r.spans.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// TestSpansAreChildrenOfTheCallersSpan: the acquire span is a child of the span in the ctx
// passed to Acquire or TryAcquire, and the hold span of the acquire's caller, whoever releases.
func TestSpansAreChildrenOfTheCallersSpan(t *testing.T) {
	r := newRecorder(t)
	tracer := r.tp.Tracer("test")
	m, err := primitives.NewMutex(memory.New(), "job", r.tel.Option())
	if err != nil {
		t.Fatal(err)
	}
	actx, acquirer := tracer.Start(t.Context(), "request")
	l, err := m.Acquire(actx)
	if err != nil {
		t.Fatal(err)
	}
	tctx, trier := tracer.Start(t.Context(), "other request")
	if _, err := m.TryAcquire(tctx); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("TryAcquire = %v, want ErrNotAcquired", err)
	}
	rctx, releaser := tracer.Start(t.Context(), "cleanup")
	if err := l.Release(rctx); err != nil {
		t.Fatal(err)
	}
	acquirer.End()
	trier.End()
	releaser.End()

	acquires := r.spansNamed(leaseotel.AcquireSpan)
	if len(acquires) != 2 {
		t.Fatalf("%d acquire spans, want 2", len(acquires))
	}
	checkParent(t, acquires[0], actx)
	checkParent(t, acquires[1], tctx)
	checkParent(t, r.span(t, leaseotel.HoldSpan), actx)
}

// TestDoSpansAreChildrenOfTheCallersSpan: Do's acquire and hold spans are children of the span
// in its ctx.
func TestDoSpansAreChildrenOfTheCallersSpan(t *testing.T) {
	r := newRecorder(t)
	m, err := primitives.NewMutex(memory.New(), "job", r.tel.Option())
	if err != nil {
		t.Fatal(err)
	}
	ctx, request := r.tp.Tracer("test").Start(t.Context(), "request")
	if err := m.Do(ctx, func(context.Context, core.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	request.End()
	checkParent(t, r.span(t, leaseotel.AcquireSpan), ctx)
	checkParent(t, r.span(t, leaseotel.HoldSpan), ctx)
}

// TestAdoptedLeaseHoldSpanIsTheReleasersChild: a lease no acquire of this Mutex granted has its
// hold span under the releaser's span.
func TestAdoptedLeaseHoldSpanIsTheReleasersChild(t *testing.T) {
	r := newRecorder(t)
	store := memory.New()
	m, err := primitives.NewMutex(store, "job", r.tel.Option())
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.Acquire(t.Context(), core.AcquireRequest{Key: "job", Holder: "elsewhere", Permits: 1, Limit: 1, TTL: time.Minute})
	if err != nil || !res.Granted {
		t.Fatal(res, err)
	}
	l, err := m.Adopt(t.Context(), "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := r.tp.Tracer("test").Start(t.Context(), "cleanup")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	span.End()
	checkParent(t, r.span(t, leaseotel.HoldSpan), ctx)
	if got := r.sum(t, leaseotel.ActiveLeases, false); got[""] != 0 {
		t.Errorf("active leases %v, want 0: an adopted lease is not counted", got)
	}
}

// errRefused is the error a dead Redis gives a dial.
var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}

// faultyStore fails Acquire, Extend or Release with errRefused while told to.
type faultyStore struct {
	*memory.Store
	acquire, extend, release atomic.Bool
}

func (s *faultyStore) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	if s.acquire.Load() {
		return core.AcquireResult{}, errRefused
	}
	return s.Store.Acquire(ctx, req)
}

func (s *faultyStore) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if s.extend.Load() {
		return core.ExtendResult{}, errRefused
	}
	return s.Store.Extend(ctx, req)
}

func (s *faultyStore) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if s.release.Load() {
		return false, errRefused
	}
	return s.Store.Release(ctx, req)
}

// holdOnFaultyStore acquires "job", with a TTL of 3s, on a faultyStore recorded by r, and
// returns the store, to make fail, and the lease.
func holdOnFaultyStore(t *testing.T, r *recorder) (*faultyStore, core.Lease) {
	t.Helper()
	store := &faultyStore{Store: memory.New()}
	m, err := primitives.NewMutex(store, "job", r.tel.Option(), primitives.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return store, l
}

// TestFailedAcquireIsRecorded: an acquire the store fails has an acquire span of status Error
// with its error.type, under the caller's span, and is counted as an error of the acquire.
func TestFailedAcquireIsRecorded(t *testing.T) {
	r := newRecorder(t)
	store := &faultyStore{Store: memory.New()}
	store.acquire.Store(true)
	m, err := primitives.NewMutex(store, "job", r.tel.Option())
	if err != nil {
		t.Fatal(err)
	}
	ctx, request := r.tp.Tracer("test").Start(t.Context(), "request")
	if _, err := m.Acquire(ctx); !errors.Is(err, errRefused) {
		t.Fatalf("Acquire = %v, want the store's error", err)
	}
	request.End()
	s := r.span(t, leaseotel.AcquireSpan)
	checkParent(t, s, ctx)
	checkAttrs(t, "acquire span", spanAttrs(s), map[string]string{"error.type": "*net.OpError", "leasehold.outcome": "acquire_failed"})
	if s.Status.Code != codes.Error || s.Status.Description != `leasehold: acquire "job": dial tcp: connect: connection refused` {
		t.Errorf("acquire span status %v, want Error with the error's text", s.Status)
	}
	if got := r.sum(t, leaseotel.ErrorsCounter, true); len(got) != 1 || got["error.type=*net.OpError,leasehold.operation=acquire"] != 1 {
		t.Errorf("errors %v, want one *net.OpError of acquire", got)
	}
}

// TestRefreshAndReleaseFailuresAreHoldSpanEvents: a run of failed refreshes is one span event
// of the hold span and one error of refresh, its end another span event, and a failed release
// a span event and an error of release.
func TestRefreshAndReleaseFailuresAreHoldSpanEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		store, l := holdOnFaultyStore(t, r)
		store.extend.Store(true)
		time.Sleep(2 * time.Second) // refreshes at 1s and 1.5s fail
		store.extend.Store(false)
		time.Sleep(time.Second)
		store.release.Store(true)
		if err := l.Release(t.Context()); !errors.Is(err, errRefused) {
			t.Fatalf("Release = %v, want the store's error", err)
		}
		store.release.Store(false)
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		hold := r.span(t, leaseotel.HoldSpan)
		var names []string
		for _, e := range hold.Events {
			names = append(names, e.Name)
			attrs := map[string]string{}
			for _, a := range e.Attributes {
				attrs[string(a.Key)] = a.Value.String()
			}
			want := map[string]string{"error.type": "*net.OpError", "exception.message": `leasehold: refresh "job": dial tcp: connect: connection refused`}
			switch e.Name {
			case leaseotel.RefreshRecoveredEvent:
				want = map[string]string{"error.type": ""}
			case leaseotel.ReleaseFailedEvent:
				want["exception.message"] = `leasehold: release "job": dial tcp: connect: connection refused`
			}
			checkAttrs(t, e.Name, attrs, want)
			if e.Time.Before(hold.StartTime) || e.Time.After(hold.EndTime) {
				t.Errorf("span event %s at %v, outside its span", e.Name, e.Time)
			}
		}
		if want := []string{leaseotel.RefreshFailedEvent, leaseotel.RefreshRecoveredEvent, leaseotel.ReleaseFailedEvent}; !slices.Equal(names, want) {
			t.Errorf("hold span events %v, want %v", names, want)
		}
		got := r.sum(t, leaseotel.ErrorsCounter, true)
		if len(got) != 2 || got["error.type=*net.OpError,leasehold.operation=refresh"] != 1 || got["error.type=*net.OpError,leasehold.operation=release"] != 1 {
			t.Errorf("errors %v, want one of refresh (one per run) and one of release", got)
		}
	})
}

// TestLeaseLostAfterFailedRefreshesIsRecorded: the hold span of a lease lost after failed
// refreshes has status Error naming the last failure, error.type lost, and the span event of the
// failures.
func TestLeaseLostAfterFailedRefreshesIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		store, l := holdOnFaultyStore(t, r)
		store.extend.Store(true)
		<-l.Done()
		synctest.Wait()
		hold := r.span(t, leaseotel.HoldSpan)
		checkAttrs(t, "hold span", spanAttrs(hold), map[string]string{"error.type": "lost", "leasehold.outcome": "lost"})
		if hold.Status.Code != codes.Error || hold.Status.Description != l.Err().Error() {
			t.Errorf("hold span status %v, want Error described as %q", hold.Status, l.Err())
		}
		if len(hold.Events) != 1 || hold.Events[0].Name != leaseotel.RefreshFailedEvent {
			t.Errorf("hold span events %v, want one %s", hold.Events, leaseotel.RefreshFailedEvent)
		}
		if got := r.sum(t, leaseotel.ActiveLeases, false); got[""] != 0 {
			t.Errorf("active leases %v after the loss, want 0", got)
		}
		l.Release(t.Context())
	})
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

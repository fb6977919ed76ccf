package leaseotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	leaseotel "github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/primitives"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewChecksOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  leaseotel.Option
		want string
	}{
		{"nil meter provider", leaseotel.WithMeterProvider(nil), "meter provider: must not be nil"},
		{"nil tracer provider", leaseotel.WithTracerProvider(nil), "tracer provider: must not be nil"},
		{"nil key func", leaseotel.WithKeyAttribute(nil), "key attribute: func must not be nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := leaseotel.New(tc.opt)
			if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || tel != nil {
				t.Errorf("New = %v, %v; want nil and an error wrapping ErrInvalid that says %q", tel, err, tc.want)
			}
		})
	}
}

func TestAcquireAndReleaseAreRecorded(t *testing.T) {
	r := newRecorder(t)
	sem, err := primitives.NewSemaphore(memory.New(), "pool", 3, r.tel.Option())
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.Acquire(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil { // the event is recorded before Release returns
		t.Fatal(err)
	}

	want := map[string]int64{"leasehold.outcome=acquired": 1, "leasehold.outcome=released": 1}
	if got := r.counts(t); len(got) != len(want) || got["leasehold.outcome=acquired"] != 1 || got["leasehold.outcome=released"] != 1 {
		t.Errorf("events %v, want %v", got, want)
	}
	wait := r.histogram(t, leaseotel.WaitDuration)["leasehold.outcome=acquired"]
	held := r.histogram(t, leaseotel.HoldDuration)["leasehold.outcome=released"]
	if wait.Count != 1 || held.Count != 1 {
		t.Fatalf("wait count %d, held count %d; want one each", wait.Count, held.Count)
	}

	fence := leaseotel.FenceAttribute
	acq := r.span(t, leaseotel.AcquireSpan)
	checkAttrs(t, "acquire span", spanAttrs(acq), map[string]string{"leasehold.key": "pool", "leasehold.outcome": "acquired",
		"leasehold.permits": "2", fence: strconv.FormatUint(l.Fence(), 10)})
	checkDuration(t, acq, wait.Sum)
	hold := r.span(t, leaseotel.HoldSpan)
	checkAttrs(t, "hold span", spanAttrs(hold), map[string]string{"leasehold.key": "pool", "leasehold.outcome": "released",
		"leasehold.permits": "2", fence: strconv.FormatUint(l.Fence(), 10)})
	checkDuration(t, hold, held.Sum)
	if hold.Status.Code != codes.Unset {
		t.Errorf("hold span status %v, want unset", hold.Status)
	}
	if hold.EndTime.Before(acq.EndTime) {
		t.Errorf("hold span ends at %v, before its acquire at %v", hold.EndTime, acq.EndTime)
	}
	noHolder(t, r, l.Holder())
}

func TestRefusalIsRecorded(t *testing.T) {
	r := newRecorder(t)
	m, err := primitives.NewMutex(memory.New(), "job", r.tel.Option())
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if _, err := m.TryAcquire(t.Context()); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held mutex = %v, want ErrNotAcquired", err)
	}

	if got := r.counts(t); got["leasehold.outcome=refused"] != 1 || got["leasehold.outcome=acquired"] != 1 {
		t.Errorf("events %v, want one acquired and one refused", got)
	}
	wait := r.histogram(t, leaseotel.WaitDuration)
	if wait["leasehold.outcome=refused"].Count != 1 || wait["leasehold.outcome=acquired"].Count != 1 {
		t.Errorf("wait histogram %v, want one acquired and one refused", wait)
	}
	var refused tracetest.SpanStub
	for _, s := range r.spans.GetSpans() {
		if s.Name == leaseotel.AcquireSpan && spanAttrs(s)["leasehold.outcome"] == "refused" {
			refused = s
		}
	}
	if refused.Name == "" {
		t.Fatalf("no refused acquire span among %v", r.spans.GetSpans())
	}
	checkAttrs(t, "refused span", spanAttrs(refused), map[string]string{"leasehold.key": "job", "leasehold.permits": "1", leaseotel.FenceAttribute: ""})
	checkDuration(t, refused, wait["leasehold.outcome=refused"].Sum)
	if refused.Status.Code != codes.Unset {
		t.Errorf("refused span status %v, want unset: a refusal is not an error", refused.Status)
	}
}

func TestLostLeaseIsRecorded(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []primitives.Option
		lose func(*testing.T, core.Store, core.Lease) // nil: wait for the deadline
	}{
		{"at its deadline", []primitives.Option{primitives.WithTTL(50 * time.Millisecond), primitives.WithoutRefresh()}, nil},
		{"found by release", nil, func(t *testing.T, store core.Store, l core.Lease) {
			// Someone else's Release frees the key; the holder's own Release finds it gone.
			store.Release(t.Context(), core.ReleaseRequest{Key: l.Key(), Holder: l.Holder(), Fence: l.Fence()})
			if err := l.Release(t.Context()); !errors.Is(err, core.ErrLost) {
				t.Fatalf("Release = %v, want ErrLost", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder(t)
			store := memory.New()
			lost := make(chan struct{})
			// Handlers run in the order given: when this one runs, the Telemetry has recorded.
			onLost := primitives.WithEvents(func(e primitives.Event) {
				if e.Kind == primitives.EventLost {
					close(lost)
				}
			})
			m, err := primitives.NewMutex(store, "job", append(tc.opts, r.tel.Option(), onLost)...)
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if tc.lose != nil {
				tc.lose(t, store, l)
			}
			select {
			case <-lost:
			case <-time.After(10 * time.Second):
				t.Fatal("no lost event within 10s")
			}
			if tc.lose == nil {
				if err := l.Release(t.Context()); !errors.Is(err, core.ErrLost) { // and no released event
					t.Errorf("Release of the lost lease = %v, want ErrLost", err)
				}
			}

			if got := r.counts(t); len(got) != 2 || got["leasehold.outcome=acquired"] != 1 || got["leasehold.outcome=lost"] != 1 {
				t.Errorf("events %v, want one acquired and one lost", got)
			}
			held := r.histogram(t, leaseotel.HoldDuration)
			if len(held) != 1 || held["leasehold.outcome=lost"].Count != 1 {
				t.Fatalf("held histogram %v, want one lost", held)
			}
			hold := r.span(t, leaseotel.HoldSpan)
			checkAttrs(t, "hold span", spanAttrs(hold), map[string]string{"leasehold.key": "job", "leasehold.outcome": "lost",
				leaseotel.FenceAttribute: strconv.FormatUint(l.Fence(), 10)})
			checkDuration(t, hold, held["leasehold.outcome=lost"].Sum)
			if hold.Status.Code != codes.Error || hold.Status.Description != l.Err().Error() {
				t.Errorf("hold span status %v, want Error described as %q", hold.Status, l.Err())
			}
			noHolder(t, r, l.Holder())
		})
	}
}

func TestKeyAttribute(t *testing.T) {
	prefix := func(key string) string { p, _, _ := strings.Cut(key, ":"); return p }
	for _, tc := range []struct {
		name          string
		opts          []leaseotel.Option
		metric, span  string // the key attribute's value, "" for none
		metricEncoded string
	}{
		{"default: spans only, as it is", nil, "", "invoice:1234", "leasehold.outcome=acquired"},
		{"mapped on both", []leaseotel.Option{leaseotel.WithKeyAttribute(prefix)}, "invoice", "invoice", "leasehold.key=invoice,leasehold.outcome=acquired"},
		{"left out by an empty value", []leaseotel.Option{leaseotel.WithKeyAttribute(func(string) string { return "" })}, "", "", "leasehold.outcome=acquired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder(t, tc.opts...)
			m, err := primitives.NewMutex(memory.New(), "invoice:1234", r.tel.Option())
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(context.Background())
			if got := r.counts(t); len(got) != 1 || got[tc.metricEncoded] != 1 {
				t.Errorf("events %v, want 1 at %s", got, tc.metricEncoded)
			}
			if h := r.histogram(t, leaseotel.WaitDuration); h[tc.metricEncoded].Count != 1 {
				t.Errorf("wait histogram %v, want 1 at %s", h, tc.metricEncoded)
			}
			got, ok := spanAttrs(r.span(t, leaseotel.AcquireSpan))[leaseotel.KeyAttribute]
			if got != tc.span || ok != (tc.span != "") {
				t.Errorf("span key attribute %q (present %v), want %q", got, ok, tc.span)
			}
		})
	}
}

// TestDefaultsAreTheGlobalProviders: without options, New records to the global providers.
func TestDefaultsAreTheGlobalProviders(t *testing.T) {
	r := &recorder{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader)))
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans)))
	// Not the providers found at the start: the first Set binds the globals' delegates for good.
	t.Cleanup(func() {
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
	})
	tel, err := leaseotel.New()
	if err != nil {
		t.Fatal(err)
	}
	r.tel = tel

	m, err := primitives.NewMutex(memory.New(), "job", tel.Option())
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l.Release(t.Context())
	if got := r.counts(t); got["leasehold.outcome=acquired"] != 1 || got["leasehold.outcome=released"] != 1 {
		t.Errorf("events %v, want one acquired and one released", got)
	}
	if n := len(r.spans.GetSpans()); n != 2 {
		t.Errorf("%d spans, want 2", n)
	}
}

// TestWaitAndHoldTimesAreTheEvents: in a bubble with fake time, a waiter kept in line for
// 500ms by a lease held as long, and its lease held 2.5s (refreshed twice meanwhile) are recorded with exactly those durations,
// on the histograms and as the spans' extents; refreshes are counted and make no span.
func TestWaitAndHoldTimesAreTheEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		m, err := primitives.NewMutex(memory.New(), "job", r.tel.Option(), primitives.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		first, err := m.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		second := make(chan core.Lease, 1)
		go func() {
			l, err := m.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			second <- l
		}()
		synctest.Wait()                    // the second Acquire waits in line
		time.Sleep(500 * time.Millisecond) // less than the TTL/3 to the first refresh
		if err := first.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		l := <-second
		time.Sleep(2500 * time.Millisecond) // refreshes at 1s and 2s
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}

		counts := r.counts(t)
		if counts["leasehold.outcome=acquired"] != 2 || counts["leasehold.outcome=released"] != 2 || counts["leasehold.outcome=refreshed"] != 2 {
			t.Errorf("events %v, want 2 acquired, 2 refreshed, 2 released", counts)
		}
		if wait := r.histogram(t, leaseotel.WaitDuration)["leasehold.outcome=acquired"]; wait.Count != 2 || wait.Sum != 0.5 {
			t.Errorf("wait histogram %+v, want 0s and 0.5s", wait)
		}
		if held := r.histogram(t, leaseotel.HoldDuration)["leasehold.outcome=released"]; held.Count != 2 || held.Sum != 3 {
			t.Errorf("held histogram %+v, want 0.5s and 2.5s", held)
		}
		var extents []string
		for _, s := range r.spans.GetSpans() {
			extents = append(extents, fmt.Sprintf("%s %v", s.Name, s.EndTime.Sub(s.StartTime)))
		}
		slices.Sort(extents) // the waiter's grant may be told before the release that made it
		want := "leasehold.acquire 0s, leasehold.acquire 500ms, leasehold.hold 2.5s, leasehold.hold 500ms"
		if got := strings.Join(extents, ", "); got != want {
			t.Errorf("spans %s, want %s", got, want)
		}
	})
}

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

package leaseotel_test

import (
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	leaseotel "github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/primitives"
)

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

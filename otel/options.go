package leaseotel

import (
	"fmt"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/core"
)

// Option configures a Telemetry. Options are checked once, by New.
type Option func(*config)

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	key     func(string) string // nil: no key on metrics, the key as it is on spans
	err     error               // the first invalid option
}

// invalid records the option described by format as invalid, unless one was already.
func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s", core.ErrInvalid, fmt.Sprintf(format, args...))
	}
}

// WithMeterProvider records metrics with mp. The default is the global MeterProvider at the
// time of New (otel.GetMeterProvider), which forwards to one set later with otel.SetMeterProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if isNil(mp) {
			c.invalid("meter provider: must not be nil")
			return
		}
		c.meters = mp
	}
}

// WithTracerProvider records spans with tp. The default is the global TracerProvider at the
// time of New (otel.GetTracerProvider), which forwards to one set later with
// otel.SetTracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if isNil(tp) {
			c.invalid("tracer provider: must not be nil")
			return
		}
		c.tracers = tp
	}
}

// WithKeyAttribute sets the leasehold.key attribute of every metric and span to f(key), and
// leaves it out where f returns "". f must map keys to a small, bounded set of values (each is a
// time series of each instrument), be quick, and be safe for concurrent use: it runs on the
// goroutine of each event. Without this option metrics carry no key and spans carry the key as
// it is.
func WithKeyAttribute(f func(key string) string) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("key attribute: func must not be nil")
			return
		}
		c.key = f
	}
}

// isNil reports whether v is nil or a nil pointer (or other nil reference) in an interface, such
// as a *sdktrace.TracerProvider left unset, whose methods would panic on the first event.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Interface, reflect.Slice, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

func newConfig(opts []Option) (config, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err != nil {
		return c, c.err
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	if c.tracers == nil {
		c.tracers = otel.GetTracerProvider()
	}
	return c, nil
}

package leaseotel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leasehold/leasehold/backend/memory"
	leaseotel "github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/primitives"
)

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

package primitives_test

import (
	"bytes"
	"context"
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
		want := "acquired refreshed refreshed refreshed refused released acquired lost"
		if got := strings.Join(log.kinds(), " "); got != want {
			t.Errorf("events %q, want %q", got, want)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if e := log.ev[4]; e.Wait != time.Second || e.Err == nil {
			t.Errorf("refused event %+v, want a 1s wait and an error", e)
		}
		if e := log.ev[5]; e.Held != 3500*time.Millisecond || e.Fence != l.Fence() {
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

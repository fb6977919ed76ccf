package primitives_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/primitives"
)

// The RWMutex's behaviours on the memory store, a store with a line: the scenarios of
// conformance/scenario, which Redlock (redlock/rwmutex_test.go) and both Redis drivers
// (backend/internal/rediscore/rwmutex_test.go) run too.

func TestRWMutexExcludesWritersAndSharesReaders(t *testing.T) {
	s := memory.New()
	var rws []*primitives.RWMutex
	for range 3 {
		rws = append(rws, scenario.MustRWMutex(t, s, "rw", primitives.WithRetryInterval(time.Millisecond)))
	}
	if peak := scenario.RWStress(t, rws, 8, 40, 500*time.Microsecond); peak < 2 {
		t.Errorf("at most %d reader at once: readers did not share the key", peak)
	}
}

func TestRWMutexWriterNotStarvedByReaders(t *testing.T) {
	s := memory.New()
	rd := scenario.MustRWMutex(t, s, "rw")
	wr := scenario.MustRWMutex(t, s, "rw", primitives.WithAcquireTimeout(5*time.Second))
	scenario.WriterNotStarved(t, rd, wr, scenario.WriterInLine(rd))
}

func TestRWMutexLineIsFIFO(t *testing.T) {
	s := memory.New()
	scenario.RWLineIsFIFO(t, func(v string) *primitives.RWMutex {
		return scenario.MustRWMutex(t, s, "rw", primitives.WithValue(v), primitives.WithRetryInterval(time.Hour))
	})
}

func TestRWMutexInspect(t *testing.T) {
	s := memory.New()
	scenario.RWInspect(t, func(v string) *primitives.RWMutex { return scenario.MustRWMutex(t, s, "rw", primitives.WithValue(v)) }, true)
}

func TestRWMutexWaitingWriterHoldsBackTries(t *testing.T) {
	s := memory.New()
	scenario.WaitingWriterHoldsBackTries(t, func() *primitives.RWMutex { return scenario.MustRWMutex(t, s, "rw") }, scenario.WriterInLine(scenario.MustRWMutex(t, s, "rw")))
}

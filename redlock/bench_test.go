package redlock_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// BenchmarkMutexPair: a Mutex Acquire and Release over Redlock of three in-process memory
// stores, whose calls cost little: what is left is Redlock's own fan-out, per pair.
func BenchmarkMutexPair(b *testing.B) {
	nodes := []core.Store{memory.New(), memory.New(), memory.New()}
	s, err := redlock.New(nodes)
	if err != nil {
		b.Fatal(err)
	}
	m, _ := primitives.NewMutex(s, "k")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

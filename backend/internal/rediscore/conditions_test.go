package rediscore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// Conditions a test waits for (with waitFor) instead of sleeping.

// drain clears a wake pending on w, if there is one.
func drain(w core.Waiter) {
	select {
	case <-w.C():
	default:
	}
}

// subscribers returns how many Stores the server at addr has subscribed to their channel of key
// (a key without glob characters): PUBSUB CHANNELS, one channel per Store (Layout.Channel).
func subscribers(t testing.TB, addr, key string) int {
	t.Helper()
	layout, _ := rediscore.NewLayout(rediscore.DefaultPrefix)
	v, err := redistest.Do(addr, "PUBSUB", "CHANNELS", layout.Channel(key, "*"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(v), "*")) // Do returns an array's header
	if err != nil {
		t.Fatalf("PUBSUB CHANNELS: %q: %v", v, err)
	}
	return n
}

// watched is a store that keeps the waiters it registers, so that a test can wait until the
// waiters of a Mutex on it have settled: enrolled, their subscription confirmed, and every wake
// so far acted on, so that they send nothing until the next wake.
type watched struct {
	store
	mu      sync.Mutex
	waiters []*watchedWaiter
}

func watch(s store) *watched { return &watched{store: s} }

func (s *watched) Register(ctx context.Context, req core.AcquireRequest) (core.Waiter, error) {
	w, err := s.store.Register(ctx, req)
	if err != nil {
		return nil, err
	}
	ww := &watchedWaiter{Waiter: w}
	s.mu.Lock()
	s.waiters = append(s.waiters, ww)
	s.mu.Unlock()
	return ww, nil
}

// settled reports whether the store has registered a waiter and every one it has is settled.
func (s *watched) settled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.waiters {
		if !w.settled.Load() {
			return false
		}
	}
	return len(s.waiters) > 0
}

// unsettle forgets that the waiters settled, for a test about to disturb them: they settle
// again when their owner next finds them Reliable with no wake pending.
func (s *watched) unsettle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.waiters {
		w.settled.Store(false)
	}
}

type watchedWaiter struct {
	core.Waiter
	settled atomic.Bool
}

// Reliable is asked by the waiter's owner (primitives) before each wait. A waiter that is
// Reliable then has had its confirmation's wake sent already; with no wake pending either, the
// owner is about to wait for the next wake, sending nothing until it comes.
func (w *watchedWaiter) Reliable() bool {
	r := w.Waiter.Reliable()
	w.settled.Store(r && len(w.Waiter.C()) == 0)
	return r
}

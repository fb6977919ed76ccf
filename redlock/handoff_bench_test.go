package redlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// BenchmarkHandoffRedisServers measures how long a released Mutex takes to reach a waiter already
// waiting for it, on one real redis-server (its line hands the lease over with the release) and
// over Redlock of three (the waiter is woken by the release and tries the quorum again), in the
// same run. Each of the two players has Stores of its own, as two processes would, and a 1 s retry
// interval, so that a waiter that noticed the release by retrying would show it. A handoff is
// timed from the holder's Release call to the waiter's Acquire returning; the holder releases
// once the waiter has made its tries (one on a node; on Redlock, its first and its try after
// watching). ns/op is the whole round; p50 and p99 are the handoff's latency.
func BenchmarkHandoffRedisServers(b *testing.B) {
	r := startWakeRig(b)
	b.Run("node", func(b *testing.B) {
		var ps [2]player
		for i := range ps {
			n := r.node()
			ps[i] = newPlayer(n, []*countedNode{n}, 1)
		}
		runHandoff(b, ps)
	})
	b.Run("redlock3", func(b *testing.B) {
		var ps [2]player
		for i := range ps {
			s, ns := r.store()
			ps[i] = newPlayer(s, ns, 2)
		}
		runHandoff(b, ps)
	})
}

// newPlayer returns a player over store and nodes, which signal their answers.
func newPlayer(store core.Store, nodes []*countedNode, tries int64) player {
	answers := make(chan struct{}, 1)
	for _, n := range nodes {
		n.answers = answers
	}
	return player{store: store, nodes: nodes, tries: tries, answers: answers}
}

// player is one side of a handoff: its Store, the nodes it counts acquires on, and how many
// tries each node answers before its waiter is settled in its wait.
type player struct {
	store core.Store
	nodes []*countedNode
	tries int64
	// answers receives after any node's answer (unless a value is pending)
	answers chan struct{}
}

// answered returns the fewest acquires any of p's nodes answered.
func (p player) answered() int64 {
	n := p.nodes[0].n.Load()
	for _, c := range p.nodes[1:] {
		n = min(n, c.n.Load())
	}
	return n
}

func runHandoff(b *testing.B, ps [2]player) {
	ctx := context.Background()
	var mus [2]*primitives.Mutex
	for i, p := range ps {
		mu, err := primitives.NewMutex(p.store, "handoff", primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		mus[i] = mu
	}
	held, err := mus[0].Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	type grant struct {
		l   primitives.Lease
		at  time.Time
		err error
	}
	var lat []time.Duration
	b.ResetTimer()
	for k := 0; b.Loop(); k++ {
		w := (k + 1) % 2
		from := ps[w].answered()
		got := make(chan grant, 1)
		go func() {
			l, err := mus[w].Acquire(ctx)
			got <- grant{l, time.Now(), err}
		}()
		for ps[w].answered() < from+ps[w].tries {
			<-ps[w].answers
		}
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			b.Fatal(err)
		}
		g := <-got
		if g.err != nil {
			b.Fatal(g.err)
		}
		lat = append(lat, g.at.Sub(released))
		held = g.l
	}
	b.StopTimer()
	if err := held.Release(ctx); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns/handoff")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns/handoff")
}

// BenchmarkWaiterWatchRedisServers measures what a Redlock waiter's watch costs, beside what it
// saves: a refused try (one quorum round) and a WatchAcquire and Close of the key over three real
// servers (a script call on each node in parallel; the key's subscriptions are already up, as
// they stay for a while after a watch closes), with the key held.
func BenchmarkWaiterWatchRedisServers(b *testing.B) {
	r := startWakeRig(b)
	ctx := context.Background()
	hs, _ := r.store()
	s, _ := r.store()
	if res, err := hs.Acquire(ctx, core.AcquireRequest{Key: "watched", Holder: "h", Permits: 1, Limit: 1, TTL: time.Hour}); err != nil || !res.Granted {
		b.Fatal(res, err)
	}
	req := core.AcquireRequest{Key: "watched", Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute}
	b.Run("refused-try", func(b *testing.B) {
		for b.Loop() {
			if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("watch", func(b *testing.B) {
		for b.Loop() {
			w, err := s.WatchAcquire(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
		}
	})
}

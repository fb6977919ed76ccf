package primitives_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The Election's behaviours on the memory store. The same scenarios run on Redlock
// (redlock/rwelection_test.go) and on both Redis drivers
// (backend/internal/rediscore/rwelection_test.go).

func mustElection(t *testing.T, store core.Store, key string, opts ...primitives.Option) *primitives.Election {
	t.Helper()
	el, err := primitives.NewElection(store, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return el
}

// oneLeaderAtATime has each election (a campaigner's view of the key, as separate processes
// would have) campaign rounds times, hold leadership briefly and resign. No two lead at once,
// each lease carries its campaign's value, and terms strictly increase in the order granted.
func oneLeaderAtATime(t *testing.T, els []*primitives.Election, rounds int) {
	t.Helper()
	ctx := context.Background()
	occ := conformance.NewOccupancy(1)
	var last atomic.Uint64
	var terms atomic.Int64
	var wg sync.WaitGroup
	for i, el := range els {
		wg.Go(func() {
			for r := range rounds {
				value := fmt.Sprintf("c%d-%d", i, r)
				l, err := el.Campaign(ctx, value)
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				if prev := last.Swap(l.Fence()); l.Fence() <= prev {
					t.Errorf("term %d granted after term %d", l.Fence(), prev)
				}
				terms.Add(1)
				if l.Value() != value {
					t.Errorf("the leader's lease has value %q, campaigned with %q", l.Value(), value)
				}
				time.Sleep(200 * time.Microsecond)
				leave()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if occ.Peak() != 1 || terms.Load() != int64(len(els)*rounds) {
		t.Errorf("%d leaders at once, %d terms; want 1 and %d", occ.Peak(), terms.Load(), len(els)*rounds)
	}
}

// resignHandsOver: b campaigns while a leads, and is in line (inLine says so); a resigns, and
// b leads at once. b's election must have a retry interval of an hour and the TTL be long, so
// that only the handover can wake b within the 10s allowed.
func resignHandsOver(t *testing.T, a, b *primitives.Election, inLine func() bool) {
	t.Helper()
	ctx := context.Background()
	la, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan core.Lease, 1)
	goBackground(t, func(ctx context.Context) {
		lb, err := b.Campaign(ctx, "b")
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- lb
	})
	for deadline := time.Now().Add(10 * time.Second); !inLine(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second campaigner is not in line after 10s")
		}
	}
	resigned := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			t.FailNow()
		}
		t.Logf("handed over %v after the resignation", time.Since(resigned))
		if lb.Fence() <= la.Fence() || lb.Value() != "b" {
			t.Errorf("the successor: term %d value %q; want a term above %d, value b", lb.Fence(), lb.Value(), la.Fence())
		}
		lb.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting campaigner did not lead within 10s of the resignation (retry interval 1h)")
	}
}

// observer reads an Observe channel, failing t when nothing comes within 10s.
type observer struct {
	t  *testing.T
	ch <-chan primitives.Leader
}

func (o observer) next() primitives.Leader {
	o.t.Helper()
	select {
	case ld, ok := <-o.ch:
		if !ok {
			o.t.Fatal("the Observe channel closed")
		}
		return ld
	case <-time.After(10 * time.Second):
		o.t.Fatal("no leader change observed within 10s")
		return primitives.Leader{}
	}
}

// expect reads the next change and fails t unless it is want.
func (o observer) expect(want primitives.Leader) {
	o.t.Helper()
	if ld := o.next(); ld != want {
		o.t.Fatalf("observed %+v, want %+v", ld, want)
	}
}

func leaderOf(l core.Lease) primitives.Leader {
	return primitives.Leader{Value: l.Value(), Holder: l.Holder(), Fence: l.Fence()}
}

// observeSeesEveryChange: leaders a, b, c in turn, each resigning before the next campaigns, on
// els[i]; obs observes: its stream is exactly none, a, none, b, none, c, none, each value and
// term the leader's. Give obs a retry interval of an hour: then only the store's
// announcements can explain a prompt update.
func observeSeesEveryChange(t *testing.T, els []*primitives.Election, obs *primitives.Election) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := observer{t, obs.Observe(ctx)}
	o.expect(primitives.Leader{})
	var last uint64
	for i, v := range []string{"a", "b", "c"} {
		l, err := els[i%len(els)].Campaign(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		o.expect(leaderOf(l))
		if l.Fence() <= last {
			t.Errorf("term %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		o.expect(primitives.Leader{})
	}
}

// observeSeesHandovers: on a store with a line, b waits while a leads and c while b does; each
// resigns: the observer sees a, b, c and then none, with no gap between them.
func observeSeesHandovers(t *testing.T, els []*primitives.Election, obs *primitives.Election, waiters func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := observer{t, obs.Observe(ctx)}
	o.expect(primitives.Leader{})
	l, err := els[0].Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	o.expect(leaderOf(l))
	for i, v := range []string{"b", "c"} {
		got := make(chan core.Lease, 1)
		goBackground(t, func(ctx context.Context) {
			next, err := els[(i+1)%len(els)].Campaign(ctx, v)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
			}
			got <- next
		})
		for deadline := time.Now().Add(10 * time.Second); waiters() != 1; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s is not in line after 10s", v)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var next core.Lease
		select {
		case next = <-got:
			if next == nil {
				t.FailNow()
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not lead within 10s of the resignation", v)
		}
		o.expect(leaderOf(next))
		if next.Fence() <= l.Fence() {
			t.Errorf("term %d after %d", next.Fence(), l.Fence())
		}
		l = next
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	o.expect(primitives.Leader{})
}

// observeSeesDeadLeaderGone: a leader whose lease is not refreshed (el: WithoutRefresh and a
// short TTL) is seen gone by obs once its lease expires, and not before its deadline. The
// observer starts once the leader leads, and has a retry interval of an hour: only the leader's
// TTL, read with it, can wake it.
func observeSeesDeadLeaderGone(t *testing.T, el, obs *primitives.Election) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := el.Campaign(ctx, "mortal")
	if err != nil {
		t.Fatal(err)
	}
	o := observer{t, obs.Observe(ctx)}
	o.expect(leaderOf(l))
	o.expect(primitives.Leader{})
	if now := time.Now(); now.Before(l.Deadline()) {
		t.Errorf("the leader was seen gone %v before its lease's deadline", l.Deadline().Sub(now))
	}
	l.Release(ctx)
}

// observeEndsWithCtx: the channel closes once ctx ends, whether or not the observer was
// reading (goleak, in TestMain, checks that its goroutine ended).
func observeEndsWithCtx(t *testing.T, obs *primitives.Election) {
	t.Helper()
	for _, read := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		ch := obs.Observe(ctx)
		if read {
			observer{t, ch}.expect(primitives.Leader{})
		}
		cancel()
		timeout := time.After(10 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break drain
				}
			case <-timeout:
				t.Fatalf("the Observe channel (read: %v) not closed within 10s of its ctx's end", read)
			}
		}
	}
}

// leaderCarriesTheValue: the leader's lease carries its campaign's value, and Leader reports
// it with the holder and term; with no leader, ok is false.
func leaderCarriesTheValue(t *testing.T, el, other *primitives.Election) {
	t.Helper()
	ctx := context.Background()
	if ld, ok, err := other.Leader(ctx); err != nil || ok || ld != (primitives.Leader{}) {
		t.Fatalf("Leader before any campaign: %+v, %v, %v; want none", ld, ok, err)
	}
	l, err := el.Campaign(ctx, "host-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	if l.Value() != "host-a:8080" || l.Permits() != 1 || l.Key() != el.Key() {
		t.Errorf("the leader's lease: value %q, %d permits, key %q", l.Value(), l.Permits(), l.Key())
	}
	if ld, ok, err := other.Leader(ctx); err != nil || !ok || ld != leaderOf(l) {
		t.Errorf("Leader = %+v, %v, %v; want %+v", ld, ok, err, leaderOf(l))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ld, ok, err := other.Leader(ctx); err != nil || ok || ld != (primitives.Leader{}) {
		t.Errorf("Leader after the resignation: %+v, %v, %v; want none", ld, ok, err)
	}
}

// lineLength returns how many wait in key's line on s.
func lineLength(s core.Store, key string) func() int {
	return func() int {
		snap, err := s.Inspect(context.Background(), key)
		if err != nil {
			return -1
		}
		return len(snap.Waiters)
	}
}

func TestElectionOneLeaderAtATime(t *testing.T) {
	s := memory.New()
	var els []*primitives.Election
	for range 4 {
		els = append(els, mustElection(t, s, "lead", primitives.WithRetryInterval(time.Millisecond)))
	}
	oneLeaderAtATime(t, els, 25)
}

func TestElectionResignHandsOverAtOnce(t *testing.T) {
	s := memory.New()
	a := mustElection(t, s, "lead", primitives.WithTTL(time.Minute))
	b := mustElection(t, s, "lead", primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Hour))
	resignHandsOver(t, a, b, func() bool { return lineLength(s, "lead")() == 1 })
}

func TestElectionObserveSeesEveryChange(t *testing.T) {
	s := memory.New()
	els := []*primitives.Election{mustElection(t, s, "lead"), mustElection(t, s, "lead")}
	obs := mustElection(t, s, "lead", primitives.WithRetryInterval(time.Hour))
	t.Run("resignations", func(t *testing.T) { observeSeesEveryChange(t, els, obs) })
	t.Run("handovers", func(t *testing.T) { observeSeesHandovers(t, els, obs, lineLength(s, "lead")) })
}

func TestElectionObserveSeesDeadLeaderGone(t *testing.T) {
	s := memory.New()
	el := mustElection(t, s, "lead", primitives.WithTTL(200*time.Millisecond), primitives.WithoutRefresh())
	obs := mustElection(t, s, "lead", primitives.WithRetryInterval(time.Hour))
	observeSeesDeadLeaderGone(t, el, obs)
}

func TestElectionObserveEndsWithCtx(t *testing.T) {
	observeEndsWithCtx(t, mustElection(t, memory.New(), "lead"))
}

func TestElectionLeaderCarriesTheValue(t *testing.T) {
	s := memory.New()
	leaderCarriesTheValue(t, mustElection(t, s, "lead"), mustElection(t, s, "lead"))
}

// inspectCounter is a Store that counts Inspects, and is no core.Watcher: an Election on it
// polls.
type inspectCounter struct {
	core.Store
	n atomic.Int64
}

func (s *inspectCounter) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	s.n.Add(1)
	return s.Store.Inspect(ctx, key)
}

// TestElectionObservePollsAtTheLongestRetryInterval: Observe on a store that cannot announce
// changes reads it every ten retry intervals; with the longest retry interval allowed
// (core.MaxDuration) that is never, within the test, after the first read — not a read loop.
// The test looks for 200ms: a loop reads thousands of times in that, a correct Observe once.
func TestElectionObservePollsAtTheLongestRetryInterval(t *testing.T) {
	s := &inspectCounter{Store: memory.New()}
	el := mustElection(t, s, "lead", primitives.WithRetryInterval(core.MaxDuration))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := observer{t, el.Observe(ctx)}
	o.expect(primitives.Leader{})
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end) && s.n.Load() < 100; time.Sleep(time.Millisecond) {
	}
	if n := s.n.Load(); n > 2 {
		t.Errorf("Observe read the store %d times within 200ms with a retry interval of %v", n, core.MaxDuration)
	}
}

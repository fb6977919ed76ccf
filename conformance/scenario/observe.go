package scenario

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// ObserveSeesEveryChange proves that Observe reports every change of leader, none included:
// leaders a, b, c in turn, each resigning before the next campaigns, on
// els[i]; obs observes: its stream is exactly none, a, none, b, none, c, none, each value and
// term the leader's. Give obs a retry interval of an hour: then only the store's
// announcements can explain a prompt update.
func ObserveSeesEveryChange(t testing.TB, els []*primitives.Election, obs *primitives.Election) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := NewObserver(t, obs.Observe(ctx))
	o.Expect(primitives.Leader{})
	var last uint64
	for i, v := range []string{"a", "b", "c"} {
		l, err := els[i%len(els)].Campaign(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		o.Expect(LeaderOf(l))
		if l.Fence() <= last {
			t.Errorf("term %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		o.Expect(primitives.Leader{})
	}
}

// ObserveSeesHandovers proves that Observe reports a handover from leader to leader: on a store with a line, b waits while a leads and c while b does; each
// resigns: the observer sees a, b, c and then none, with no gap between them.
func ObserveSeesHandovers(t testing.TB, els []*primitives.Election, obs *primitives.Election, waiters func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := NewObserver(t, obs.Observe(ctx))
	o.Expect(primitives.Leader{})
	l, err := els[0].Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	o.Expect(LeaderOf(l))
	for i, v := range []string{"b", "c"} {
		got := make(chan core.Lease, 1)
		GoBackground(t, func(ctx context.Context) {
			next, err := els[(i+1)%len(els)].Campaign(ctx, v)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
			}
			got <- next
		})
		poll.Until(t, v+" in line", func() bool { return waiters() == 1 })
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
		o.Expect(LeaderOf(next))
		if next.Fence() <= l.Fence() {
			t.Errorf("term %d after %d", next.Fence(), l.Fence())
		}
		l = next
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	o.Expect(primitives.Leader{})
}

// ObserveSeesDeadLeaderGone proves that Observe sees a leader gone when its lease expires: a leader whose lease is not refreshed (el: WithoutRefresh and a
// short TTL) is seen gone by obs once its lease expires, and not before its deadline. The
// observer starts once the leader leads, and has a retry interval of an hour: only the leader's
// TTL, read with it, can wake it.
func ObserveSeesDeadLeaderGone(t testing.TB, el, obs *primitives.Election) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := el.Campaign(ctx, "mortal")
	if err != nil {
		t.Fatal(err)
	}
	o := NewObserver(t, obs.Observe(ctx))
	o.Expect(LeaderOf(l))
	o.Expect(primitives.Leader{})
	if now := time.Now(); now.Before(l.Deadline()) {
		t.Errorf("the leader was seen gone %v before its lease's deadline", l.Deadline().Sub(now))
	}
	l.Release(ctx)
}

// ObserveEndsWithCtx proves that Observe's channel closes once its ctx ends, whether or not
// the observer was reading. Check in the caller's TestMain (goleak) that its goroutine ended.
func ObserveEndsWithCtx(t testing.TB, obs *primitives.Election) {
	t.Helper()
	for _, read := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		ch := obs.Observe(ctx)
		if read {
			NewObserver(t, ch).Expect(primitives.Leader{})
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

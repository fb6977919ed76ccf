package redlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

// Fan-out rounds (fanout.go): a round's calls share one deadline and one context. These tests run
// in synctest bubbles over scripted nodes: node delays are fake time, and synctest.Wait is the
// synchronisation.

// TestHungNodeCutOffAtNodeTimeoutAndQuorumReturnsAtOnce: with node 2 of three hung,
// Acquire, Extend and Release each return after the grace alone (graceMin: the others answered
// at once), not the node timeout; the hung node's call of each round ends at the round's
// deadline, node timeout after the round began, with DeadlineExceeded (nothing cancels it).
func TestHungNodeCutOffAtNodeTimeoutAndQuorumReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		log := &callLog{}
		_, ss := scriptedNodes(3, hangOn(log, 2), nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(timeout))
		ctx := context.Background()
		req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
		ops := []struct {
			op string
			do func() error
		}{
			{"acquire", func() error {
				r, err := s.Acquire(ctx, req)
				if err == nil && !r.Granted {
					err = errors.New("refused")
				}
				return err
			}},
			{"extend", func() error {
				_, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute})
				return err
			}},
			{"release", func() error {
				ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"})
				if err == nil && !ok {
					err = errors.New("not held")
				}
				return err
			}},
		}
		for _, o := range ops {
			begin := time.Now()
			if err := o.do(); err != nil {
				t.Fatalf("%s with node 2 hung: %v", o.op, err)
			}
			if took := time.Since(begin); took != 2*time.Millisecond {
				t.Errorf("%s with node 2 hung took %v, want the grace alone (2ms), far below the node timeout %v", o.op, took, timeout)
			}
		}
		synctest.Wait()
		time.Sleep(timeout) // fake time: every round's deadline passes
		synctest.Wait()
		for _, o := range ops {
			calls := log.get(2, o.op)
			if len(calls) != 1 {
				t.Fatalf("node 2 got %d %s calls, want 1", len(calls), o.op)
			}
			c := calls[0]
			if !c.ended || c.end.Sub(c.begin) != timeout || !errors.Is(c.err, context.DeadlineExceeded) {
				t.Errorf("node 2's hung %s: ended %v after %v with %v; want cut off at the node timeout %v with DeadlineExceeded", o.op, c.ended, c.end.Sub(c.begin), c.err, timeout)
			}
		}
	})
}

// TestRoundEveryNodeAnsweredWaitsNoGraceAndEndsItsContext: when every node answers at
// once, Release returns without waiting (no grace timer), and the round's context is canceled
// (its timer stopped) as soon as the last node answered, not left to its deadline.
func TestRoundEveryNodeAnsweredWaitsNoGraceAndEndsItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &callLog{}
		_, ss := scriptedNodes(3, hangOn(log), nil)
		s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second))
		ctx := context.Background()
		begin := time.Now()
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took != 0 {
			t.Errorf("Release with every node answering at once took %v, want no wait", took)
		}
		for i := range 3 {
			c := log.get(i, "release")
			if len(c) != 1 {
				t.Fatalf("node %d: %d release calls, want 1", i, len(c))
			}
			if err := c[0].ctx.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("node %d's call context after the round: %v, want Canceled (the round's timer stopped when the last node answered)", i, err)
			}
		}
	})
}

// TestSlowerNodeGetsAsLongAgainAndGoesOnAfterDecision: nodes 0 and 1 answer a release
// after 10ms. A node 2 answering after 15ms is waited for (the grace is as long again); one
// answering after 25ms is left behind at 20ms, and its release still completes, uncanceled,
// after the caller's ctx ended.
func TestSlowerNodeGetsAsLongAgainAndGoesOnAfterDecision(t *testing.T) {
	for _, tc := range []struct {
		slow, want time.Duration
	}{{15 * time.Millisecond, 15 * time.Millisecond}, {25 * time.Millisecond, 20 * time.Millisecond}} {
		synctest.Test(t, func(t *testing.T) {
			log := &callLog{}
			before := func(ctx context.Context, i int, op string) error {
				c := log.add(ctx, i, op)
				d := 10 * time.Millisecond
				if i == 2 {
					d = tc.slow
				}
				time.Sleep(d) // a slow node, ignoring ctx
				log.finish(c, ctx.Err())
				return nil
			}
			ns, ss := scriptedNodes(3, before, nil)
			s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second))
			req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
			for _, n := range ns {
				if r, err := n.Store.Acquire(context.Background(), req); err != nil || !r.Granted {
					t.Fatal(r, err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			begin := time.Now()
			ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"})
			cancel()
			if err != nil || !ok {
				t.Fatalf("Release: %v, %v", ok, err)
			}
			if took := time.Since(begin); took != tc.want {
				t.Errorf("node 2 answering after %v: Release took %v, want %v", tc.slow, took, tc.want)
			}
			synctest.Wait()
			time.Sleep(tc.slow)
			synctest.Wait()
			c := log.get(2, "release")
			if len(c) != 1 || !c[0].ended || c[0].err != nil {
				t.Fatalf("node 2's release: %+v; want it ended with its context live", c)
			}
			if snap, err := ns[2].Store.Inspect(context.Background(), "k"); err != nil || len(snap.Leases) != 0 {
				t.Errorf("node 2 after its late release: %+v, %v; want the lease released", snap, err)
			}
		})
	}
}

// TestGrantAnsweredAfterDeadlineIsReleased: nodes 0 and 1 refuse (another holder);
// node 2 grants at once but its answer reaches us only after the round's deadline (the answer
// ignores ctx). The late grant is a straggler's after a refusal: it is released.
func TestGrantAnsweredAfterDeadlineIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		released := make(chan struct{})
		after := func(ctx context.Context, i int, op string) {
			switch {
			case i == 2 && op == "acquire":
				time.Sleep(2 * timeout) // the answer is late, past the round's deadline
			case i == 2 && op == "release":
				close(released)
			}
		}
		ns, ss := scriptedNodes(3, nil, after)
		s := mustNew(t, ss, redlock.WithNodeTimeout(timeout))
		ctx := context.Background()
		other := core.AcquireRequest{Key: "k", Holder: "other", Permits: 1, Limit: 1, TTL: time.Hour}
		for _, n := range ns[:2] {
			if r, err := n.Store.Acquire(ctx, other); err != nil || !r.Granted {
				t.Fatal(r, err)
			}
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || res.Granted {
			t.Fatalf("Acquire: %+v, %v; want refused", res, err)
		}
		<-released
		if snap, err := ns[2].Store.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 0 {
			t.Errorf("node 2 after its late grant was settled: %+v, %v; want released", snap, err)
		}
	})
}

package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

var errReplyLost = errors.New("reply lost")

// lostGrant is a memory store whose acquires take effect and are answered with errReplyLost:
// a grant the caller never hears of.
type lostGrant struct{ *memory.Store }

func (n lostGrant) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	if _, err := n.Store.AcquireAbove(ctx, req, floor); err != nil {
		return core.AcquireResult{}, err
	}
	return core.AcquireResult{}, errReplyLost
}

func memoryStores(n int) []*memory.Store {
	var ns []*memory.Store
	for range n {
		ns = append(ns, memory.New())
	}
	return ns
}

func mustHold(t *testing.T, n *memory.Store, holder string, limit int) {
	t.Helper()
	r, err := n.Acquire(context.Background(), core.AcquireRequest{Key: "k", Holder: holder, Permits: 1, Limit: limit, TTL: time.Hour})
	if err != nil || !r.Granted {
		t.Fatalf("%s's lease: %+v, %v", holder, r, err)
	}
}

// TestRefusedAcquireGivesBackEveryGrantSeenLostOrLate: of five nodes, two hold the key for
// another holder, one grants, one grants with its reply lost and one grants after the refusal
// was decided. The acquire is refused with the refusing nodes' wait, and none of the three grants
// stays: the seen and the lost one are given back before Acquire returns, the late one when it
// answers.
func TestRefusedAcquireGivesBackEveryGrantSeenLostOrLate(t *testing.T) {
	ctx := context.Background()
	ns := memoryStores(5)
	s := mustNew(t, []core.Store{ns[0], lostGrant{ns[1]}, ns[2], ns[3], lateAnswer{ns[4], 100 * time.Millisecond}})
	mustHold(t, ns[2], "other", 1)
	mustHold(t, ns[3], "other", 1)
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true})
	if err != nil || res.Granted {
		t.Fatalf("Acquire with two nodes held and one reply lost: %+v, %v; want refused", res, err)
	}
	if res.RetryAfter < 59*time.Minute || res.RetryAfter > time.Hour {
		t.Errorf("RetryAfter %v, want the refusing nodes' wait (about an hour)", res.RetryAfter)
	}
	for _, i := range []int{0, 1} {
		if holds(t, ns[i], "k", "a") {
			t.Errorf("node %d still holds the refused acquire's grant after Acquire returned", i)
		}
	}
	poll.Until(t, "the late grant on node 4 given back", func() bool { return !holds(t, ns[4], "k", "a") })
	for _, i := range []int{2, 3} {
		if !holds(t, ns[i], "k", "other") {
			t.Errorf("node %d lost the other holder's lease", i)
		}
	}
}

// TestAcquireFailedByLostRepliesGivesBackEveryGrant: of three nodes, one grants and two grant
// with their replies lost: failures alone leave no quorum, so Acquire fails with the nodes'
// errors, and no node keeps the grant.
func TestAcquireFailedByLostRepliesGivesBackEveryGrant(t *testing.T) {
	ns := memoryStores(3)
	s := mustNew(t, []core.Store{ns[0], lostGrant{ns[1]}, lostGrant{ns[2]}})
	res, err := s.Acquire(context.Background(), core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true})
	if !errors.Is(err, errReplyLost) || res.Granted {
		t.Fatalf("Acquire with two of three replies lost: %+v, %v; want the nodes' errors", res, err)
	}
	for i, n := range ns {
		if holds(t, n, "k", "a") {
			t.Errorf("node %d still holds the failed acquire's grant", i)
		}
	}
}

// TestMismatchedAcquireGivesBackAGrantWhoseReplyIsLost: of five nodes, three hold the key under
// another limit, one grants and one grants with its reply lost. The unshared acquire fails with
// ErrLimitMismatch and gives back both grants.
func TestMismatchedAcquireGivesBackAGrantWhoseReplyIsLost(t *testing.T) {
	ns := memoryStores(5)
	s := mustNew(t, []core.Store{ns[0], lostGrant{ns[1]}, ns[2], ns[3], ns[4]})
	for _, n := range ns[2:] {
		mustHold(t, n, "stray", 3)
	}
	_, err := s.Acquire(context.Background(), core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true})
	if !errors.Is(err, core.ErrLimitMismatch) {
		t.Fatalf("Acquire of limit 1 with three nodes held under limit 3: %v, want ErrLimitMismatch", err)
	}
	for _, i := range []int{0, 1} {
		if holds(t, ns[i], "k", "a") {
			t.Errorf("node %d still holds the mismatched acquire's grant", i)
		}
	}
}

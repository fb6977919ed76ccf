package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestGrantIsNotTakenFromANoticeWhileATryIsInFlight: a waiter heard of the grant the line made
// it; while a try of its holder is on its way (which may be finding that grant), the grant is not
// taken from the notice, and once the try has ended it is, once.
func TestGrantIsNotTakenFromANoticeWhileATryIsInFlight(t *testing.T) {
	s := &Store{}
	l := newListener(s, nil, "ch")
	s.l = l
	l.up = true
	req := core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true}
	l.afterTry(l.beforeTry(req, true), false, 10)
	w, err := s.Register(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		l.mu.Lock()
		w.(*waiter).Queued = false // nothing to leave: there is no database
		l.mu.Unlock()
		w.Close()
	}()
	l.deliver(l.channel, noticeOf(req.Key, req.Holder)+" 11")
	inFlight := l.beforeTry(req, true)
	if fence, _, ok := l.takeGrant(req); ok {
		t.Fatalf("grant of fence %d taken while a try of its holder is in flight", fence)
	}
	l.endTry(inFlight)
	if fence, _, ok := l.takeGrant(req); !ok || fence != 11 {
		t.Fatalf("after the try ended: takeGrant = %d, %v; want fence 11", fence, ok)
	}
	if _, _, ok := l.takeGrant(req); ok {
		t.Fatal("the grant taken twice")
	}
}

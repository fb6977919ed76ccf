package rediscore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// Tests of the subscriber without a server: the grant bookkeeping of one Store's waiters (what
// it gives back to the line, the leaves it starts, and when) and the marks of its watches.

// leaveLog records the leaves a Store's waiters start, and whether their mu was held then.
type leaveLog struct {
	mu     sync.Mutex
	leaves []owedLeave
	locked []bool
}

func (l *leaveLog) all() []owedLeave {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.leaves)
}

// reclaimLog records the decisions of reclaim timers.
type reclaimLog struct {
	mu        sync.Mutex
	decisions []string
}

func (r *reclaimLog) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.decisions)
}

// newTestSubs returns the subscriber of a Store with tm, whose leaves go to the log returned,
// and the log of its reclaim timers' decisions.
func newTestSubs(t *testing.T, tm timings) (*subscriber, *leaveLog, *reclaimLog) {
	l, _ := newLayout(defaultPrefix)
	testTimings.Store(&tm)
	subs := newSubscriber(l, "store", nopPubSub{})
	testTimings.Store(nil)
	ll := &leaveLog{}
	subs.lines.leave = func(key, holder string, floor uint64) {
		locked := !subs.lines.mu.TryLock()
		if !locked {
			subs.lines.mu.Unlock()
		}
		ll.mu.Lock()
		ll.leaves = append(ll.leaves, owedLeave{key, holder, floor})
		ll.locked = append(ll.locked, locked)
		ll.mu.Unlock()
	}
	rl := &reclaimLog{}
	f := func(key, holder string, fence uint64, given bool) {
		rl.mu.Lock()
		rl.decisions = append(rl.decisions, fmt.Sprintf("%s %s %d given=%v", key, holder, fence, given))
		rl.mu.Unlock()
	}
	testReclaimed.Store(&f)
	t.Cleanup(func() {
		testReclaimed.Store(nil)
		subs.close()
	})
	return subs, ll, rl
}

// takeWithoutRoundTrip has holder, refused on key at fence floor, enroll, hears of the line's
// grant of fence floor+1 from a reply of this Store's (its own Release granted it), take it
// without a round trip, and close its waiter, as primitives does once it holds the lease.
func takeWithoutRoundTrip(t *testing.T, subs *subscriber, key, holder string, floor uint64) core.AcquireRequest {
	t.Helper()
	ctx := context.Background()
	req := core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true}
	subs.lines.afterTry(ctx, try{}, tryOutcome{key: key, holder: holder, waits: true, fence: floor, sent: waitline.Sent{At: time.Now(), Req: req}})
	w, err := subs.lines.register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	subs.lines.granted(subs.lines.channel(key), []grant{{holder: holder, fence: floor + 1}}, fromReply)
	fence, _, ok := subs.lines.takeGrant(req)
	if !ok || fence != floor+1 {
		t.Fatalf("takeGrant = %d, %v; want the grant of fence %d taken without a round trip", fence, ok, floor+1)
	}
	w.Close()
	return req
}

// TestLateGrantMessageAfterFloorsSweptGivesNothingBack: a waiter takes a grant from its Store's
// reply without a round trip (the lease stays marked untaken on the server until its first
// refresh), and the line's message about the same grant, on the Store's subscription
// connection, comes late: after keepGrants, by when a busy key's floors, the holder's among
// them, have been swept. The Store must not take the message for a grant its holder never
// enrolled for and give it back: the leave would drop the lease from under its holder, and the
// line would grant it to the next waiter, two holders.
func TestLateGrantMessageAfterFloorsSweptGivesNothingBack(t *testing.T) {
	subs, leaves, reclaims := newTestSubs(t, timings{linger: time.Hour, reclaim: time.Millisecond, keep: 5 * time.Millisecond})
	took := time.Now()
	takeWithoutRoundTrip(t, subs, "k", "b", 100)
	poll.Until(t, "b's floor older than keepGrants", func() bool { return time.Since(took) > 10*time.Millisecond })
	// A busy key: 64 more holders' tries and releases record their floors, and sweep b's.
	for i := range 64 {
		subs.lines.afterTry(context.Background(), try{}, tryOutcome{key: "k", holder: fmt.Sprint("busy-", i), granted: true, fence: uint64(200 + i)})
		subs.lines.released("k", fmt.Sprint("busy-", i))
	}
	subs.lines.mu.Lock()
	_, kept := subs.lines.channels[subs.lines.channel("k")].floors["b"]
	subs.lines.mu.Unlock()
	if kept {
		t.Fatal("b's floor was not swept: the test does not test what it says")
	}
	lateGrantMessageGivesNothingBack(t, subs, leaves, reclaims)
}

// TestLateGrantMessageAfterChannelExpiredGivesNothingBack: as above, the message about a grant
// taken without a round trip comes late, here after the key's channel lingered and expired
// (taking the holder's floor with it) and was made again for another waiter.
func TestLateGrantMessageAfterChannelExpiredGivesNothingBack(t *testing.T) {
	subs, leaves, reclaims := newTestSubs(t, timings{linger: time.Millisecond, reclaim: time.Millisecond, keep: time.Hour})
	takeWithoutRoundTrip(t, subs, "k", "b", 100)
	name := subs.lines.channel("k")
	poll.Until(t, "the channel expired", func() bool {
		subs.lines.mu.Lock()
		defer subs.lines.mu.Unlock()
		return subs.lines.channels[name] == nil
	})
	subs.lines.mu.Lock()
	subs.lines.timings.linger = time.Hour // the channel made again stays
	subs.lines.mu.Unlock()
	// Another waiter's refused try subscribes again.
	subs.lines.afterTry(context.Background(), try{}, tryOutcome{key: "k", holder: "c", waits: true, fence: 101})
	lateGrantMessageGivesNothingBack(t, subs, leaves, reclaims)
}

// lateGrantMessageGivesNothingBack has the line's message about the grant of fence 101 to b at
// key "k", which b took without a round trip, come late on the key's channel, and fails t unless
// the Store decides not to give it back and sends no leave.
func lateGrantMessageGivesNothingBack(t *testing.T, subs *subscriber, leaves *leaveLog, reclaims *reclaimLog) {
	t.Helper()
	subs.lines.granted(subs.lines.channel("k"), []grant{{holder: "b", fence: 101}}, fromChannel)
	poll.Until(t, "the late grant's reclaim decided", func() bool { return len(reclaims.all()) == 1 })
	if d := reclaims.all()[0]; d != "k b 101 given=false" {
		t.Fatalf("reclaim decided %q; want the grant b took not given back", d)
	}
	if l := leaves.all(); len(l) != 0 {
		t.Fatalf("leaves sent %v; want none (b holds the lease)", l)
	}
}

// TestLingerEndingBeforeReclaimStillGivesTheGrantBack: a caller refused with a place in the line
// gives up before enrolling, on a key whose channel lingers (no waiter enrolled); the line's
// grant to it is heard of, and the linger ends before the grant's reclaim is due. The channel
// must stay until the grant is given back, and go after: unsubscribing then would forget the
// grant, and the key would be held by nobody until the grant's TTL.
func TestLingerEndingBeforeReclaimStillGivesTheGrantBack(t *testing.T) {
	subs, leaves, reclaims := newTestSubs(t, timings{linger: time.Hour, reclaim: time.Hour, keep: time.Hour})
	name := subs.lines.channel("k")
	subs.lines.afterTry(context.Background(), try{}, tryOutcome{key: "k", holder: "gone", waits: true, fence: 100})
	subs.lines.granted(name, []grant{{holder: "gone", fence: 101}}, fromChannel)
	subs.lines.mu.Lock()
	c := subs.lines.channels[name]
	n := c.lingers
	subs.lines.mu.Unlock()
	subs.lines.expire(c, n) // the linger ends, within the grant's reclaimAfter
	subs.lines.mu.Lock()
	still := subs.lines.channels[name] == c
	pending := len(c.recent) == 1 && c.recent[0].reclaim != nil && c.recent[0].reclaim.Reset(0) // the reclaim is due now
	subs.lines.mu.Unlock()
	if !still || !pending {
		t.Fatalf("after the linger ended: channel kept %v, reclaim pending %v; want both (the grant is not given back yet)", still, pending)
	}
	poll.Until(t, "the grant given back", func() bool { return len(leaves.all()) == 1 })
	if l := leaves.all()[0]; l != (owedLeave{"k", "gone", 100}) {
		t.Fatalf("leave %+v; want the grant of fence 101 to gone given back", l)
	}
	if d := reclaims.all(); !slices.Equal(d, []string{"k gone 101 given=true"}) {
		t.Fatalf("reclaims decided %q", d)
	}
	// Then the channel goes, at its next look (timings.reclaim after the postponed linger).
	subs.lines.mu.Lock()
	if c.linger == nil || c.lingers == n {
		subs.lines.mu.Unlock()
		t.Fatal("the linger was not started again")
	}
	n = c.lingers
	subs.lines.mu.Unlock()
	subs.lines.expire(c, n)
	subs.lines.mu.Lock()
	gone := subs.lines.channels[name] == nil
	subs.lines.mu.Unlock()
	if !gone {
		t.Fatal("the channel stayed after its grant was given back")
	}
}

// TestRefusalKeepsALingeringChannel: a refused try by a caller not enrolled, on a key whose
// channel lingers, starts the linger again: the caller is about to enroll, and the line's grant
// to it must be heard of here (the refusal's place is checked: a PUBLISH to this Store must
// count it while its waiter may still come).
func TestRefusalKeepsALingeringChannel(t *testing.T) {
	subs, _, _ := newTestSubs(t, timings{linger: time.Hour, reclaim: time.Hour, keep: time.Hour})
	name := subs.lines.channel("k")
	subs.lines.afterTry(context.Background(), try{}, tryOutcome{key: "k", holder: "first", waits: true, fence: 100})
	subs.lines.mu.Lock()
	c := subs.lines.channels[name]
	n := c.lingers
	subs.lines.mu.Unlock()
	subs.lines.afterTry(context.Background(), try{}, tryOutcome{key: "k", holder: "second", waits: true, fence: 100})
	subs.lines.expire(c, n) // the linger that ran before the second refusal ends
	subs.lines.mu.Lock()
	defer subs.lines.mu.Unlock()
	if subs.lines.channels[name] != c {
		t.Fatal("the channel expired right after a refusal of a caller about to enroll")
	}
}

// TestCloseOwesAGrantWhoseReclaimFired: a Store closes while a grant's reclaim timer has fired
// but not yet run (it waits for the lock close holds). The reclaim then finds the Store closed
// and sends nothing, so close must owe the leave: the grant is given back, once.
func TestCloseOwesAGrantWhoseReclaimFired(t *testing.T) {
	subs, leaves, _ := newTestSubs(t, timings{linger: time.Hour, reclaim: time.Hour, keep: time.Hour})
	name := subs.lines.channel("k")
	subs.lines.afterTry(context.Background(), try{}, tryOutcome{key: "k", holder: "gone", waits: true, fence: 100})
	subs.lines.granted(name, []grant{{holder: "gone", fence: 101}}, fromChannel)
	subs.lines.mu.Lock()
	// The refusal's record, which close would owe a leave for too, is gone: the records of
	// callers that never enrolled are dropped when 4096 pile up (see afterTry).
	clear(subs.lines.tries)
	timer := subs.lines.channels[name].recent[0].reclaim
	// Until the timer has fired (Stop then finds it expired): its reclaim is then running, held
	// up by s.mu.
	poll.Until(t, "the reclaim timer to fire", func() bool {
		if !timer.Stop() {
			return true
		}
		timer.Reset(0)
		return false
	})
	owed := subs.closeLocked()
	subs.lines.mu.Unlock()
	var gave []owedLeave
	for _, o := range owed {
		if o.holder == "gone" && o.floor == 100 {
			gave = append(gave, o)
		}
	}
	if len(gave) != 1 {
		t.Fatalf("close owes %+v; want the grant of fence 101 to gone given back once", owed)
	}
	if l := leaves.all(); len(l) != 0 {
		t.Fatalf("leaves sent after close %+v; want none (close owes it)", l)
	}
}

// TestWaiterLeavesBeforeItIsGone: a waiter that closes with a place in the line starts its
// leave before it lets go of the lock under which it left: a Store's Close, which owes only
// the waiters still enrolled and then stops taking leaves, cannot come between the two.
func TestWaiterLeavesBeforeItIsGone(t *testing.T) {
	subs, leaves, _ := newTestSubs(t, timings{linger: time.Hour, reclaim: time.Hour, keep: time.Hour})
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	subs.lines.afterTry(ctx, try{}, tryOutcome{key: "k", holder: "h", waits: true, fence: 100, sent: waitline.Sent{At: time.Now(), Req: req}})
	w, err := subs.lines.register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	leaves.mu.Lock()
	defer leaves.mu.Unlock()
	if len(leaves.leaves) != 1 || !leaves.locked[0] {
		t.Fatalf("leaves %+v, started under the lock %v; want one, started before the waiter let go of the lock", leaves.leaves, leaves.locked)
	}
}

// TestTakenGrantRecordGoesWithItsRelease: the record of a grant taken without a round trip,
// which keeps a late message about it from giving it back, goes when the holder releases the
// lease through the Store (nothing of it is left on the server to give back), so that the
// records are no more than the leases held.
func TestTakenGrantRecordGoesWithItsRelease(t *testing.T) {
	subs, _, _ := newTestSubs(t, timings{linger: time.Hour, reclaim: time.Hour, keep: time.Hour})
	takeWithoutRoundTrip(t, subs, "k", "b", 100)
	takeWithoutRoundTrip(t, subs, "k", "c", 200)
	subs.lines.released("k", "b")
	subs.lines.mu.Lock()
	defer subs.lines.mu.Unlock()
	if _, ok := subs.lines.taken[subs.lines.channel("k")+"\x00"+"c"]; len(subs.lines.taken) != 1 || !ok {
		t.Fatalf("records of taken grants %v; want c's alone", subs.lines.taken)
	}
}

// TestStaleWatchScriptMarksNothing: a watch refresh sent before the connection went down (it
// may have reached a server that has since restarted empty) does not make the watch Reliable
// when its success comes back after the Down; only a watch script sent after it can.
func TestStaleWatchScriptMarksNothing(t *testing.T) {
	l, _ := newLayout(defaultPrefix)
	subs := newSubscriber(l, "store", nopPubSub{})
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	subs.watches.mark = func(string) error {
		if calls.Add(1) == 1 {
			close(entered)
			<-release // the stale script: sent before the Down, answered after it
			return nil
		}
		return errors.New("server still down") // the scripts the Down starts
	}
	w, err := subs.watches.watch("k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		w.Close()
		subs.close()
	}()
	subs.Confirmed(l.changed("k"))
	done := make(chan struct{})
	go func() { subs.watches.refresh(w.k); close(done) }()
	<-entered
	subs.Down()
	poll.Until(t, "Down to start a watch script", func() bool { return calls.Load() >= 2 })
	subs.Confirmed(l.changed("k")) // the subscription is back before the stale answer
	close(release)
	<-done
	if w.Reliable() {
		t.Fatal("a watch script answered after the Down made the watch Reliable: the server may have lost the watch entry")
	}
}

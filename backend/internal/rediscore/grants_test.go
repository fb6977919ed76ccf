package rediscore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/core"
)

// TestStaleGrantDoesNotWake: a grant made before a holder's latest refusal (its fence not above
// the key's last fence then) does not wake the holder's waiter; a fresh one does.
func TestStaleGrantDoesNotWake(t *testing.T) {
	l, _ := newLayout(defaultPrefix)
	subs := newSubscriber(l, "store", nopPubSub{}).lines
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	ch := subs.channel("k")
	subs.afterTry(ctx, try{}, tryOutcome{key: "k", holder: "h", waits: true, fence: 100})
	w, err := subs.register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	drain := func() bool {
		select {
		case <-w.C():
			return true
		default:
			return false
		}
	}
	drain() // it starts woken: the subscription was not confirmed before the try
	subs.granted(ch, []grant{{holder: "h", fence: 100}}, fromReply)
	if drain() {
		t.Fatal("a grant whose fence is not above the last fence at the refusal woke the waiter")
	}
	subs.granted(ch, []grant{{holder: "other", fence: 150}}, fromReply)
	if drain() {
		t.Fatal("a grant to another holder woke the waiter")
	}
	subs.granted(ch, []grant{{holder: "h", fence: 151}}, fromReply)
	if !drain() {
		t.Fatal("a fresh grant did not wake the waiter")
	}
}

type nopPubSub struct{}

func (nopPubSub) Subscribe(context.Context, string) error   { return nil }
func (nopPubSub) Unsubscribe(context.Context, string) error { return nil }

func newTestChannel() *channel {
	return &channel{name: "c", key: "k", keep: keepGrants, waiters: map[string][]*lineWaiter{}, floors: map[string]floorAt{},
		keptBy: map[string]int{}}
}

// TestFloorsCostO1Amortized: a try or a release by a holder not enrolled records its floor. A
// busy key sees a new holder at every Acquire, thousands within keepGrants; recording a floor
// read every floor of the last keepGrants, so each call on such a key cost a pass over
// thousands of entries (2 µs and more a call, 100 µs at a few thousand handoffs a second). Now
// the floors are swept when they have doubled since the last sweep, and are never more than
// twice the live ones at the last sweep.
func TestFloorsCostO1Amortized(t *testing.T) {
	c := newTestChannel()
	const n = 10000
	for i := range n {
		c.setFloor(fmt.Sprint("holder-", i), uint64(i))
	}
	if len(c.floors) != n {
		t.Fatalf("%d floors kept, want all %d (none is older than keepGrants)", len(c.floors), n)
	}
	// log2(10000/64) ≈ 7.3: one sweep per doubling.
	if c.scans > 10 {
		t.Fatalf("%d passes over the floors for %d floors recorded, want one per doubling (at most 10)", c.scans, n)
	}
	// Floors older than keepGrants go at the next sweep, and the floors stay within twice the
	// live ones.
	for h := range c.floors {
		c.floors[h] = floorAt{c.floors[h].fence, time.Now().Add(-2 * keepGrants)}
	}
	for i := range 3 * n {
		c.setFloor(fmt.Sprint("new-", i), uint64(i))
		if live := i + 1; len(c.floors) > max(2*live, 64) && len(c.floors) > c.sweepAt {
			t.Fatalf("after %d live floors, %d kept (sweep at %d)", live, len(c.floors), c.sweepAt)
		}
	}
	for h := range c.floors {
		if len(h) > 7 && h[:7] == "holder-" {
			t.Fatalf("floor %q, older than keepGrants, still kept after %d sweeps", h, c.scans)
		}
	}
}

// TestForgetLooksUpHoldersWithNoKeptGrant: a release reply's grants to other Stores' waiters
// are kept here for keepGrants (their holders may be this Store's, about to enroll), thousands
// on a busy key; forgetting the grants of a holder with none (every try and release of a holder
// not enrolled does) no longer reads them all. A holder's kept grants are still all found, and
// the count of each holder's grants follows what is kept.
func TestForgetLooksUpHoldersWithNoKeptGrant(t *testing.T) {
	c := newTestChannel()
	now := time.Now()
	for i := range 5000 {
		c.remember(recentGrant{grant: grant{holder: fmt.Sprint("other-", i%2500), fence: uint64(i + 1)}, at: now})
	}
	for i := range 5000 {
		c.forget(fmt.Sprint("mine-", i), math.MaxUint64, nil)
		c.setFloor(fmt.Sprint("mine-", i), 1)
	}
	if c.scans > 10 {
		t.Fatalf("%d passes over the kept grants or floors for 5000 holders with none kept, want one per doubling of the floors", c.scans)
	}
	// other-7 has fences 8 and 2508.
	var took []uint64
	c.forget("other-7", 100, func(f uint64) { took = append(took, f) })
	if !slices.Equal(took, []uint64{8}) {
		t.Fatalf("forget(other-7, up to 100) took %v, want [8]", took)
	}
	took = nil
	c.forget("other-7", math.MaxUint64, func(f uint64) { took = append(took, f) })
	if !slices.Equal(took, []uint64{2508}) {
		t.Fatalf("forget(other-7) took %v, want [2508]", took)
	}
	// Grants older than keepGrants go as new ones come; the counts follow.
	c.remember(recentGrant{grant: grant{holder: "late", fence: 1}, at: now.Add(keepGrants + time.Millisecond)})
	count := map[string]int{}
	for _, r := range c.recent {
		count[r.holder]++
	}
	if len(c.recent) != 1 || !maps.Equal(count, c.keptBy) {
		t.Fatalf("after the old grants lapsed: %d kept, counts %v, want 1 and %v", len(c.recent), c.keptBy, count)
	}
}

// refBook is a channel's grant bookkeeping as it was before the per-holder counts and the
// amortized sweep of the floors (300fbbb): every forget reads every kept grant, and every floor
// recorded past 64 sweeps the floors older than keepGrants. It is the reference the channel's
// must agree with.
type refBook struct {
	recent []recentGrant
	floors map[string]floorAt
}

// setFloor is channel.setFloor before 300fbbb.
func (b *refBook) setFloor(holder string, fence uint64) {
	now := time.Now()
	if len(b.floors) >= 64 {
		for h, f := range b.floors {
			if now.Sub(f.at) > keepGrants {
				delete(b.floors, h)
			}
		}
	}
	b.floors[holder] = floorAt{fence, now}
	b.forget(holder, fence, nil)
}

// forget is channel.forget before 300fbbb.
func (b *refBook) forget(holder string, atMost uint64, took func(fence uint64)) {
	kept := b.recent[:0]
	for _, r := range b.recent {
		if r.holder != holder || r.fence > atMost {
			kept = append(kept, r)
			continue
		}
		if r.reclaim != nil {
			r.reclaim.Stop()
		}
		if took != nil {
			took(r.fence)
		}
	}
	clear(b.recent[len(kept):])
	b.recent = kept
}

// remember is channel.remember before 300fbbb.
func (b *refBook) remember(g recentGrant) {
	i := 0
	for i < len(b.recent) && g.at.Sub(b.recent[i].at) > keepGrants {
		i++
	}
	b.recent = append(b.recent[i:], g)
}

// TestBookkeepingAgreesWithTheReference drives a channel's grant bookkeeping and the reference
// (refBook) with the same random sequences of what the Store does to it: grants heard of (from
// a reply, or from the channel with a reclaim timer), tries and releases recording floors,
// registers dropping a floor and taking every kept grant, reclaims taking one, and time passing
// (floors aged by moving their times back, grants given their times). After each step: the
// same grants are kept in the same order, each forget takes the same fences in the same order
// and stops the same reclaim timers, keptBy counts exactly the grants kept per holder, and a
// holder's floor is the same in both unless it is older than keepGrants (the sweeps, at
// different calls, drop only those). The floors also stay within twice the most recorded within
// keepGrants at any time, or 64.
func TestBookkeepingAgreesWithTheReference(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := newTestChannel()
		ref := &refBook{floors: map[string]floorAt{}}
		start, base := time.Now(), time.Now()
		var vnow time.Duration              // virtual time since base
		setAt := map[string]time.Duration{} // holder → virtual time its floor was last recorded
		timers := map[uint64][2]*time.Timer{}
		defer func() {
			for _, ts := range timers {
				ts[0].Stop()
				ts[1].Stop()
			}
		}()
		pool := rapid.IntRange(1, 2000).Draw(rt, "holders")
		holder := func() string { return fmt.Sprint("h", rapid.IntRange(0, pool-1).Draw(rt, "holder")) }
		var fences uint64
		fence := func() uint64 {
			if rapid.IntRange(0, 4).Draw(rt, "max fence") == 0 {
				return math.MaxUint64
			}
			return rapid.Uint64Range(0, fences+1).Draw(rt, "fence")
		}
		peak := 0
		steps := rapid.IntRange(1, 2000).Draw(rt, "steps")
		for range steps {
			var took, refTook []uint64
			// Mostly floors, as on a busy key where each Acquire records one.
			op := rapid.IntRange(0, 9).Draw(rt, "op")
			switch op {
			case 0, 1: // time passes: 70 ms steps never land a floor or grant exactly on keepGrants
				d := time.Duration(rapid.IntRange(0, 3).Draw(rt, "advance")) * 70 * time.Millisecond
				vnow += d
				for h, f := range c.floors {
					c.floors[h] = floorAt{f.fence, f.at.Add(-d)}
				}
				for h, f := range ref.floors {
					ref.floors[h] = floorAt{f.fence, f.at.Add(-d)}
				}
			case 2, 3: // a grant heard of for a holder not enrolled
				fences++
				g := grant{holder: holder(), fence: fences}
				r, rr := recentGrant{grant: g, at: base.Add(vnow)}, recentGrant{grant: g, at: base.Add(vnow)}
				if rapid.Bool().Draw(rt, "from channel") {
					r.reclaim, rr.reclaim = time.AfterFunc(time.Hour, func() {}), time.AfterFunc(time.Hour, func() {})
					timers[g.fence] = [2]*time.Timer{r.reclaim, rr.reclaim}
				}
				c.remember(r)
				ref.remember(rr)
			case 4, 5, 6: // a try's outcome or a release: the holder's floor
				h, f := holder(), fence()
				c.setFloor(h, f)
				ref.setFloor(h, f)
				setAt[h] = vnow
			case 7: // a register: its own floor governs, and it takes every kept grant
				h := holder()
				delete(c.floors, h)
				delete(ref.floors, h)
				delete(setAt, h)
				c.forget(h, math.MaxUint64, func(f uint64) { took = append(took, f) })
				ref.forget(h, math.MaxUint64, func(f uint64) { refTook = append(refTook, f) })
			case 8, 9: // a reclaim's or a waiter's forget up to a fence
				h, f := holder(), fence()
				c.forget(h, f, func(f uint64) { took = append(took, f) })
				ref.forget(h, f, func(f uint64) { refTook = append(refTook, f) })
			}
			if !slices.Equal(took, refTook) {
				rt.Fatalf("op %d: forget took %v, the reference %v", op, took, refTook)
			}
			if len(c.recent) != len(ref.recent) {
				rt.Fatalf("op %d: %d grants kept, the reference %d", op, len(c.recent), len(ref.recent))
			}
			count := map[string]int{}
			for i, r := range c.recent {
				if rr := ref.recent[i]; r.grant != rr.grant || !r.at.Equal(rr.at) {
					rt.Fatalf("op %d: kept grant %d is %+v, the reference's %+v", op, i, r.grant, rr.grant)
				}
				count[r.holder]++
			}
			if len(count) != len(c.keptBy) {
				rt.Fatalf("op %d: keptBy %v, kept grants per holder %v", op, c.keptBy, count)
			}
			for h, n := range count {
				if c.keptBy[h] != n {
					rt.Fatalf("op %d: keptBy[%s] = %d, %d kept", op, h, c.keptBy[h], n)
				}
			}
			// A sweep drops a floor whose real age exceeds keepGrants; its real age is at most its
			// virtual age plus the real time since start.
			old := keepGrants - time.Since(start)
			for h := range setAt {
				f, ok := c.floors[h]
				rf, rok := ref.floors[h]
				if ok && rok && f.fence != rf.fence {
					rt.Fatalf("op %d: floor of %s is %d, the reference's %d", op, h, f.fence, rf.fence)
				}
				if ok != rok && vnow-setAt[h] <= old {
					rt.Fatalf("op %d: floor of %s kept %v, by the reference %v, recorded %v ago (within keepGrants)",
						op, h, ok, rok, vnow-setAt[h])
				}
				if !ok && !rok {
					delete(setAt, h)
				}
			}
			live := 0
			for _, at := range setAt {
				if vnow-at <= keepGrants {
					live++
				}
			}
			peak = max(peak, live)
			if len(c.floors) > max(64, 2*peak)+1 {
				rt.Fatalf("op %d: %d floors, at most %d recorded within keepGrants at any time", op, len(c.floors), peak)
			}
		}
		// The timers each forget stopped are the reference's: each pair is still running or not alike.
		for f, ts := range timers {
			if a, b := ts[0].Stop(), ts[1].Stop(); a != b {
				rt.Fatalf("grant %d's reclaim timer running: %v, the reference's: %v", f, a, b)
			}
		}
	})
}

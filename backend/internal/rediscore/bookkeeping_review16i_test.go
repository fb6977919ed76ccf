package rediscore

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

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

package conformance

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/core"
)

// modelLease is the model's view of one lease.
type modelLease struct {
	permits int
	fence   uint64
	expiry  time.Duration // on the model's clock
	delay   time.Duration // its lock delay: expired unreleased, it keeps its permits until expiry+delay
	value   string
}

// held reports whether the lease is unexpired at now.
func (l modelLease) held(now time.Duration) bool { return l.expiry > now }

// closedUntil is when the lease's permits are free, unless it is released first.
func (l modelLease) closedUntil() time.Duration { return l.expiry + l.delay }

// values are the lease values the state machine draws: none, plain, bytes a store might
// mistake for its own separators, and the longest allowed.
var values = []string{"", "host-a pid 4242", "a\nb q 1 2\x00{x}%", strings.Repeat("v", core.MaxValueLen)}

// model is a pure description of a correct store: keys of leases on a clock of its own.
type model struct {
	now       time.Duration
	leases    map[string]map[string]modelLease // key → holder → lease
	lastFence map[string]uint64
}

// live returns the key's leases that are unexpired or in their lock delay, dropping the others.
func (m *model) live(key string) map[string]modelLease {
	ls := m.leases[key]
	if ls == nil {
		ls = make(map[string]modelLease)
		m.leases[key] = ls
	}
	for h, l := range ls {
		if l.closedUntil() <= m.now {
			delete(ls, h)
		}
	}
	return ls
}

func inUse(ls map[string]modelLease) int {
	n := 0
	for _, l := range ls {
		n += l.permits
	}
	return n
}

// retryAfter is when, by expiry and the end of lock delays alone, need more permits would be free.
func (m *model) retryAfter(ls map[string]modelLease, need int) time.Duration {
	exp := make([]modelLease, 0, len(ls))
	for _, l := range ls {
		exp = append(exp, l)
	}
	sort.Slice(exp, func(i, j int) bool { return exp[i].closedUntil() < exp[j].closedUntil() })
	for _, l := range exp {
		if need -= l.permits; need <= 0 {
			return l.closedUntil() - m.now
		}
	}
	return 0
}

// machine drives a Store and the model with the same random steps.
type machine struct {
	s      *suite
	stores []core.Store
	keys   []string
	limit  map[string]int
	m      model
	maxTTL time.Duration
}

func (s *suite) testStateMachine(t *testing.T) {
	stores := []core.Store{s.h.NewStore(t), s.h.NewStore(t)}
	rapid.Check(t, func(rt *rapid.T) {
		mc := &machine{s: s, stores: stores, limit: map[string]int{}, maxTTL: time.Hour,
			m: model{leases: map[string]map[string]modelLease{}, lastFence: map[string]uint64{}}}
		if s.manual {
			mc.maxTTL = 5 * time.Second
		}
		for i := range 2 {
			k := newKey(t) + fmt.Sprint(i)
			mc.keys = append(mc.keys, k)
			mc.limit[k] = rapid.IntRange(1, 4).Draw(rt, "limit")
		}
		actions := map[string]func(*rapid.T){
			"acquire": mc.acquire,
			"extend":  mc.extend,
			"release": mc.release,
			"inspect": mc.inspect,
			"":        mc.check,
		}
		if s.manual {
			actions["advance"] = mc.advance
		}
		rt.Repeat(actions)
	})
}

var holderIDs = []string{"h0", "h1", "h2", "h3"}

func (mc *machine) draw(rt *rapid.T) (core.Store, string, string) {
	// Draw an index, not the Store: rapid logs what it draws with %#v, which would read a Store's
	// insides (maps, mutexes) while its background goroutines write them.
	st := mc.stores[rapid.IntRange(0, len(mc.stores)-1).Draw(rt, "store")]
	return st, rapid.SampledFrom(mc.keys).Draw(rt, "key"), rapid.SampledFrom(holderIDs).Draw(rt, "holder")
}

func (mc *machine) drawTTL(rt *rapid.T) time.Duration {
	if !mc.s.manual {
		return mc.maxTTL
	}
	return time.Duration(rapid.IntRange(1, int(mc.maxTTL/(100*time.Millisecond))).Draw(rt, "ttl/100ms")) * 100 * time.Millisecond
}

func (mc *machine) acquire(rt *rapid.T) {
	st, key, holder := mc.draw(rt)
	limit := mc.limit[key]
	n := rapid.IntRange(1, limit).Draw(rt, "permits")
	ttl := mc.drawTTL(rt)
	value := rapid.SampledFrom(values).Draw(rt, "value")
	var delay time.Duration
	if mc.s.manual {
		delay = time.Duration(rapid.SampledFrom([]int{0, 0, 1, 15}).Draw(rt, "lockDelay/100ms")) * 100 * time.Millisecond
	}
	res, err := st.Acquire(rt.Context(), core.AcquireRequest{Key: key, Holder: holder, Permits: n, Limit: limit, TTL: ttl, Value: value, LockDelay: delay})
	ls := mc.m.live(key)
	if cur, ok := ls[holder]; ok && !cur.held(mc.m.now) {
		if err != nil || res.Granted || res.RetryAfter <= 0 || res.RetryAfter > max(cur.closedUntil()-mc.m.now, mc.m.retryAfter(ls, inUse(ls)+n-limit)) {
			rt.Fatalf("Acquire by %s during its own lease's lock delay (%v left): %+v, %v; want refused until the delay ends",
				holder, cur.closedUntil()-mc.m.now, res, err)
		}
		return
	} else if ok {
		if cur.permits != n {
			if !errors.Is(err, core.ErrInvalid) {
				rt.Fatalf("re-acquire by %s with %d permits (holds %d): err = %v, want ErrInvalid", holder, n, cur.permits, err)
			}
			return
		}
		if err != nil || !res.Granted || res.Fence != cur.fence {
			rt.Fatalf("re-acquire by holder %s: %+v, %v; want granted again with fence %d", holder, res, err, cur.fence)
		}
		cur.expiry = mc.m.now + ttl
		cur.delay = delay
		cur.value = value
		ls[holder] = cur
		return
	}
	if err != nil {
		rt.Fatalf("Acquire: %v", err)
	}
	if used := inUse(ls); used+n > limit {
		if res.Granted {
			rt.Fatalf("Acquire of %d by %s granted with %d of %d in use", n, holder, used, limit)
		}
		want := mc.m.retryAfter(ls, used+n-limit)
		if mc.s.manual && res.RetryAfter != want || res.RetryAfter <= 0 || res.RetryAfter > want {
			rt.Fatalf("refusal RetryAfter = %v, want %v", res.RetryAfter, want)
		}
		return
	}
	if !res.Granted {
		rt.Fatalf("Acquire of %d by %s refused with %d of %d in use", n, holder, inUse(ls), limit)
	}
	if res.Fence <= mc.m.lastFence[key] {
		rt.Fatalf("fence %d is not above the key's previous %d", res.Fence, mc.m.lastFence[key])
	}
	mc.m.lastFence[key] = res.Fence
	ls[holder] = modelLease{permits: n, fence: res.Fence, expiry: mc.m.now + ttl, delay: delay, value: value}
}

func (mc *machine) extend(rt *rapid.T) {
	st, key, holder := mc.draw(rt)
	ttl := mc.drawTTL(rt)
	res, err := st.Extend(rt.Context(), core.ExtendRequest{Key: key, Holder: holder, TTL: ttl})
	ls := mc.m.live(key)
	cur, ok := ls[holder]
	if !ok || !cur.held(mc.m.now) {
		if !errors.Is(err, core.ErrLost) {
			rt.Fatalf("Extend by non-holder %s: %+v, %v; want ErrLost", holder, res, err)
		}
		return
	}
	if err != nil || res.Permits != cur.permits || res.Fence != cur.fence || res.Limit != mc.limit[key] || res.Value != cur.value {
		rt.Fatalf("Extend by holder %s: %+v, %v; want permits %d, fence %d, limit %d, value %.40q", holder, res, err, cur.permits, cur.fence, mc.limit[key], cur.value)
	}
	cur.expiry = mc.m.now + ttl
	ls[holder] = cur
}

func (mc *machine) release(rt *rapid.T) {
	st, key, holder := mc.draw(rt)
	ls := mc.m.live(key)
	cur, held := ls[holder]
	held = held && cur.held(mc.m.now)
	// The lease's own fence, any fence (zero), or one the holder does not hold.
	fence := rapid.SampledFrom([]uint64{cur.fence, 0, cur.fence + 1}).Draw(rt, "fence")
	ok, err := st.Release(rt.Context(), core.ReleaseRequest{Key: key, Holder: holder, Fence: fence})
	if err != nil {
		rt.Fatalf("Release: %v", err)
	}
	if want := held && (fence == 0 || fence == cur.fence); ok != want {
		rt.Fatalf("Release by %s with fence %d (holds %v, fence %d) = %v, want %v", holder, fence, held, cur.fence, ok, want)
	}
	if ok {
		delete(ls, holder)
	}
}

func (mc *machine) advance(rt *rapid.T) {
	d := time.Duration(rapid.IntRange(0, 30).Draw(rt, "advance/100ms")) * 100 * time.Millisecond
	if !mc.s.h.Advance(d) {
		rt.Fatalf("Advance(%v) reported false after Advance(0) reported true", d)
	}
	mc.m.now += d
}

// inspect compares one key's Inspect with the model.
func (mc *machine) inspect(rt *rapid.T) {
	mc.compare(rt, rapid.SampledFrom(mc.keys).Draw(rt, "key"))
}

// check runs after every step: every key agrees with the model and is within its limit.
func (mc *machine) check(rt *rapid.T) {
	for _, key := range mc.keys {
		mc.compare(rt, key)
	}
}

func (mc *machine) compare(rt *rapid.T, key string) {
	snap, err := mc.stores[0].Inspect(rt.Context(), key)
	if err != nil {
		rt.Fatalf("Inspect: %v", err)
	}
	all := mc.m.live(key)
	ls, delayed := map[string]modelLease{}, map[string]modelLease{}
	for h, l := range all {
		if l.held(mc.m.now) {
			ls[h] = l
		} else {
			delayed[h] = l
		}
	}
	if n := snap.InUse() + snap.Closed(); n > mc.limit[key] {
		rt.Fatalf("%d permits in use or closed by a lock delay, limit %d", n, mc.limit[key])
	}
	if len(snap.Leases) != len(ls) {
		rt.Fatalf("Inspect: %d leases %+v, model has %d %+v", len(snap.Leases), snap.Leases, len(ls), ls)
	}
	if len(snap.Delayed) != len(delayed) {
		rt.Fatalf("Inspect: %d delayed leases %+v, model has %d %+v", len(snap.Delayed), snap.Delayed, len(delayed), delayed)
	}
	for i, got := range snap.Delayed {
		want, ok := delayed[got.Holder]
		left := want.closedUntil() - mc.m.now
		switch {
		case !ok || got.Permits != want.permits || got.Fence != want.fence:
			rt.Fatalf("Inspect: delayed lease %+v, model's delayed leases %+v", got, delayed)
		case mc.s.manual && got.Left != left, got.Left <= 0 || got.Left > left+mc.s.resolution:
			rt.Fatalf("Inspect: %s's delay has %v left, model %v", got.Holder, got.Left, left)
		case i > 0 && snap.Delayed[i-1].Fence >= got.Fence:
			rt.Fatalf("Inspect: delayed leases not ordered by fence: %+v", snap.Delayed)
		}
	}
	for i, got := range snap.Leases {
		want, ok := ls[got.Holder]
		switch {
		case !ok:
			rt.Fatalf("Inspect: lease of %s, which the model says holds none", got.Holder)
		case got.Permits != want.permits || got.Fence != want.fence:
			rt.Fatalf("Inspect: %s holds %d permits with fence %d, model %d with %d", got.Holder, got.Permits, got.Fence, want.permits, want.fence)
		case got.Value != want.value:
			rt.Fatalf("Inspect: %s's value is %.40q, model %.40q", got.Holder, got.Value, want.value)
		case mc.s.manual && got.TTL != want.expiry-mc.m.now:
			rt.Fatalf("Inspect: %s has %v left, model %v", got.Holder, got.TTL, want.expiry-mc.m.now)
		case got.TTL <= 0 || got.TTL > want.expiry-mc.m.now+mc.s.resolution:
			rt.Fatalf("Inspect: %s has %v left, model at most %v", got.Holder, got.TTL, want.expiry-mc.m.now)
		case i > 0 && snap.Leases[i-1].Fence >= got.Fence:
			rt.Fatalf("Inspect: leases not ordered by fence: %+v", snap.Leases)
		}
	}
}

package rediscore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// Election on a real redis-server through both drivers (see eachDriver), each Election with a
// Store of its own, as separate processes have: the scenarios of conformance/scenario, and a
// leader whose Store closes. Those that follow Observe with a retry interval of an hour (so
// that only a Watch notification explains a prompt update) need the Redis core's Watch;
// elections under faults are in electfaults_test.go.

func TestElectionOnRedisOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		var els []*primitives.Election
		for range 4 {
			els = append(els, scenario.MustElection(t, mk(), "lead", primitives.WithRetryInterval(time.Millisecond)))
		}
		scenario.OneLeaderAtATime(t, els, 15)
	})
}

func TestElectionOnRedisResignHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		a := scenario.MustElection(t, mk(), "lead", primitives.WithTTL(time.Minute))
		b := scenario.MustElection(t, mk(), "lead", primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Hour))
		scenario.ResignHandsOver(t, a, b, func() bool { return lineLen(t, addr, "lead") == 1 })
	})
}

func TestElectionOnRedisObserveSeesEveryChange(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		els := []*primitives.Election{scenario.MustElection(t, mk(), "lead"), scenario.MustElection(t, mk(), "lead")}
		obs := scenario.MustElection(t, mk(), "lead", primitives.WithRetryInterval(time.Hour))
		t.Run("resignations", func(t *testing.T) { scenario.ObserveSeesEveryChange(t, els, obs) })
		t.Run("handovers", func(t *testing.T) {
			scenario.ObserveSeesHandovers(t, els, obs, func() int { return lineLen(t, addr, "lead") })
		})
	})
}

func TestElectionOnRedisObserveSeesDeadLeaderGone(t *testing.T) {
	testenv.SkipShort(t, "waits out a leader's 1 s lease six times")
	t.Parallel()
	// The observer must see the leader before its lease ends: a TTL a loaded machine's stalls
	// do not outlast.
	const ttl = time.Second
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		t.Run("not refreshed", func(t *testing.T) {
			el := scenario.MustElection(t, mk(), "lead", primitives.WithTTL(ttl), primitives.WithoutRefresh())
			obs := scenario.MustElection(t, mk(), "lead", primitives.WithRetryInterval(time.Hour))
			scenario.ObserveSeesDeadLeaderGone(t, el, obs)
		})
		t.Run("store closed", func(t *testing.T) {
			ls := mk()
			el := scenario.MustElection(t, ls, "closed", primitives.WithTTL(ttl))
			obs := scenario.MustElection(t, mk(), "closed", primitives.WithRetryInterval(time.Hour))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l, err := el.Campaign(ctx, "mortal")
			if err != nil {
				t.Fatal(err)
			}
			o := scenario.NewObserver(t, obs.Observe(ctx))
			o.Expect(scenario.LeaderOf(l))
			ls.Close() // the leader's process goes: its lease stays on the server until its TTL
			o.Expect(primitives.Leader{})
			if now := time.Now(); now.Before(l.Deadline()) {
				t.Errorf("the leader was seen gone %v before its lease's deadline", l.Deadline().Sub(now))
			}
			l.Release(ctx)
		})
	})
}

func TestElectionOnRedisObserveEndsWithCtx(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		noLeaks(t)
		scenario.ObserveEndsWithCtx(t, scenario.MustElection(t, mk(), "lead"))
	})
}

func TestElectionOnRedisLeaderCarriesTheValue(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		scenario.LeaderCarriesTheValue(t, scenario.MustElection(t, mk(), "lead"), scenario.MustElection(t, mk(), "lead"))
	})
}

// Elections on a real redis-server through both drivers under faults: a paused server, a
// partitioned leader.

// term is one leadership as its leader saw it: from Campaign's return until its release or its
// lease's deadline, whichever came first.
type term struct {
	who        int
	fence      uint64
	start, end time.Time
	lost       bool // ended by the lease's deadline or loss, not by a resignation
}

// electUnderFault has each election campaign, lead for 20-100ms and resign, over and over until
// three terms have begun after the fault; after a few terms, inject brings a fault about and ends it. leading(i) tells inject
// whether campaigner i leads now; between faulting(true) and faulting(false) a leader does not
// resign, but leads for as long as its lease lets it. No two terms overlap, by the leaders' own
// view (each counts as leading from Campaign's return until min(its release, its lease's
// Deadline)), terms increase in that order, a leader lost its lease to the fault, and a leader is
// elected after the fault.
func electUnderFault(t *testing.T, els []*primitives.Election, inject func(leading func(i int) bool, faulting func(bool))) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make([]atomic.Bool, len(els))
	var faulting atomic.Bool
	var mu sync.Mutex
	var terms []term
	var wg sync.WaitGroup
	for i, el := range els {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := el.Campaign(ctx, fmt.Sprintf("c%d", i))
				if err != nil {
					if ctx.Err() == nil {
						t.Logf("campaigner %d: %v", i, err) // the fault: try again
						select {
						case <-ctx.Done():
						case <-time.After(10 * time.Millisecond):
						}
					}
					continue
				}
				tm := term{who: i, fence: l.Fence(), start: time.Now()}
				leading[i].Store(true)
				for hold := time.After(time.Duration(20+rand.N(80)) * time.Millisecond); ; {
					select {
					case <-hold:
						if faulting.Load() { // lead on through the fault, while the lease lasts
							hold = time.After(5 * time.Millisecond)
							continue
						}
					case <-l.Done():
					case <-ctx.Done():
					}
					break
				}
				tm.end = time.Now()
				if d := l.Deadline(); d.Before(tm.end) {
					tm.end, tm.lost = d, true
				}
				if l.Err() != nil {
					tm.lost = true
				}
				if tm.end.Before(tm.start) { // a lease granted already past its deadline led for no time
					tm.end = tm.start
				}
				leading[i].Store(false)
				mu.Lock()
				terms = append(terms, tm)
				mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
				l.Release(rctx) // fails when the lease was lost, or the fault holds
				rcancel()
			}
		})
	}
	poll.Until(t, "five terms before the fault", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(terms) >= 5
	})
	inject(func(i int) bool { return leading[i].Load() }, faulting.Store)
	faulting.Store(false)
	faultEnd := time.Now()
	poll.Until(t, "three terms begun after the fault", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, tm := range terms {
			if tm.start.After(faultEnd) {
				n++
			}
		}
		return n >= 3
	})
	cancel()
	wg.Wait()
	slices.SortFunc(terms, func(a, b term) int { return a.start.Compare(b.start) })
	lost, after := 0, 0
	var latest term // the term that ends last of those so far
	for k, tm := range terms {
		if tm.lost {
			lost++
		}
		if tm.start.After(faultEnd) {
			after++
		}
		if k > 0 {
			if prev := terms[k-1]; tm.fence <= prev.fence {
				t.Errorf("term %d after term %d", tm.fence, prev.fence)
			}
			if tm.start.Before(latest.end) {
				t.Errorf("two leaders at once: campaigner %d (term %d) from %v while campaigner %d (term %d) led until %v",
					tm.who, tm.fence, tm.start.Format("15:04:05.000000"), latest.who, latest.fence, latest.end.Format("15:04:05.000000"))
			}
		}
		if k == 0 || tm.end.After(latest.end) {
			latest = tm
		}
	}
	t.Logf("%d terms, %d ended by loss, %d after the fault", len(terms), lost, after)
	if after == 0 {
		t.Error("no leader was elected after the fault ended")
	}
	if lost == 0 {
		t.Error("no leader lost its lease to the fault: the scenario did not test it")
	}
}

// TestElectionOnRedisUnderFaults: three campaigners, each with a Store of its own, under a
// server paused (SIGSTOP) past the TTL, and under a partition of the leader alone (its Store
// reaches the server through a proxy that holds all traffic for three TTLs while it leads): never
// two leaders at once by their own deadlines, terms increase, and leadership resumes.
func TestElectionOnRedisUnderFaults(t *testing.T) {
	testenv.SkipShort(t, "pauses redis-server and partitions a client from it")
	const ttl = 300 * time.Millisecond
	noLeaks(t) // after all the scenarios, which run two at once
	for name, mk := range drivers(t) {
		t.Run(name+"/paused", func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			var els []*primitives.Election
			for range 3 {
				els = append(els, scenario.MustElection(t, mk(t, srv.Addr), "lead", primitives.WithTTL(ttl)))
			}
			electUnderFault(t, els, func(leading func(int) bool, faulting func(bool)) {
				faulting(true)
				poll.Until(t, "a leader", func() bool { return leading(0) || leading(1) || leading(2) })
				pauseProcess(srv.Pid())
				time.Sleep(3 * ttl)
				resumeProcess(srv.Pid())
				faulting(false)
			})
		})
		t.Run(name+"/leader partitioned", func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			px := redistest.StartProxy(t, srv.Addr)
			els := []*primitives.Election{scenario.MustElection(t, mk(t, px.Addr), "lead", primitives.WithTTL(ttl))}
			for range 2 {
				els = append(els, scenario.MustElection(t, mk(t, srv.Addr), "lead", primitives.WithTTL(ttl)))
			}
			electUnderFault(t, els, func(leading func(int) bool, faulting func(bool)) {
				for { // partition campaigner 0 while it leads, and have it lead on
					poll.Until(t, "campaigner 0 leading", func() bool { return leading(0) })
					if faulting(true); leading(0) {
						break
					}
					faulting(false)
				}
				px.Hold(true)
				time.Sleep(3 * ttl)
				px.Cut()
				px.Hold(false)
				faulting(false)
			})
		})
	}
}

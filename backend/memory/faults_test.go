package memory_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// jumpClock is the real clock plus an offset that a test moves, as an NTP step would.
type jumpClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *jumpClock) jump(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// jumpRun runs the fault workload on a memory store whose clock jumps by jump half a second in,
// and checks it (linearizable when the jump cannot make leases end early). It runs in a bubble:
// fake time, so that the 200 ms leases see only the jump, never a loaded machine's stall.
func jumpRun(t *testing.T, jump time.Duration, linearizable bool) {
	synctest.Test(t, func(t *testing.T) {
		clock := &jumpClock{}
		st := memory.New(memory.WithClock(clock))
		w := &history.Workload{Keys: 2, Workers: 6, TTL: 200 * time.Millisecond, Duration: 1500 * time.Millisecond, CallBudget: time.Second,
			NewStore: func() core.Store { return st }}
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.Run(t)
		}()
		time.Sleep(500 * time.Millisecond) // fake time: half a second into the workload
		clock.jump(jump)
		<-done
		w.Check(t, linearizable)
	})
}

// TestFaultClockJumpsForward: the store's clock jumps three TTLs ahead mid-workload. Leases
// expire early by the store's clock while their holders still believe in them, so two may
// hold at once; fences still increase, and the fenced resource refuses the stale holder.
func TestFaultClockJumpsForward(t *testing.T) { jumpRun(t, 600*time.Millisecond, false) }

// TestFaultClockJumpsBack: the store's clock jumps three TTLs back mid-workload. Leases last
// longer by the store's clock; nothing is granted twice, so the history is linearizable and
// fences, which never go below the last one, still increase.
func TestFaultClockJumpsBack(t *testing.T) { jumpRun(t, -600*time.Millisecond, true) }

// TestFaultClockJumpStalledHolder: after a forward jump expires its lease early, a holder that
// still believes in it writes after the next holder: the resource refuses it.
func TestFaultClockJumpStalledHolder(t *testing.T) {
	clock := &jumpClock{}
	st := memory.New(memory.WithClock(clock))
	var res history.Resource
	ctx := context.Background()
	m, _ := primitives.NewMutex(st, "jump", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Second))
	a, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res.Write(a.Fence())
	a.StopRefresh()
	clock.jump(2 * time.Minute) // a's lease expires by the store's clock; a's deadline is still ahead
	b, err := m.Acquire(ctx)
	if err != nil {
		t.Fatalf("after the jump the lock should be free: %v", err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence %d after %d: fences went back", b.Fence(), a.Fence())
	}
	res.Write(b.Fence())
	if a.Err() == nil && res.Write(a.Fence()) {
		t.Error("the holder whose lease expired early wrote after its successor")
	}
	b.Release(ctx)
}

// TestFaultRepliesLost: for a second and a half of the workload, every fifth call's reply is
// lost — the store runs the call, and its caller's ctx (50 ms) ends first — and, in the second
// case, the call is sent again after the caller gave up, as a client library that retries
// does. The history is linearizable (a call that failed may have taken effect), fences
// increase, and each key is free again within its TTL and conformance.FreeBound of the
// workload's end: a grant whose reply was lost, given back or not, strands no key. The lease
// held across the fault may lose a refresh's reply and be lost; if so, by its deadline. It runs
// in a bubble: on fake time, a call cut short ends at its deadline exactly.
func TestFaultRepliesLost(t *testing.T) {
	for name, retry := range map[string]bool{"lost": false, "lost and retried": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := memory.New()
				lost := &history.LostReplies{Every: 5, Retry: retry}
				const ttl = 400 * time.Millisecond
				history.Fault{
					NewStore: func() core.Store { return lost.Wrap(st) },
					TTL:      ttl, Duration: 2 * time.Second, CallBudget: 50 * time.Millisecond,
					Linearizable: true, MayLose: true,
					FreeAfter: ttl + conformance.FreeBound,
					Inject: func() {
						time.Sleep(300 * time.Millisecond)
						lost.Set(true)
						time.Sleep(1500 * time.Millisecond)
						lost.Set(false)
					},
				}.Run(t)
				lost.Wait()
				// The portable layer's give-backs run beside the workload, each within the TTL:
				// the bubble's time reaches their end before it closes.
				time.Sleep(ttl)
				synctest.Wait()
			})
		})
	}
}

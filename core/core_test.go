package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

func TestManualClockMovesBothWays(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := core.NewManualClock(start)
	c.Advance(time.Minute)
	if got := c.Now(); !got.Equal(start.Add(time.Minute)) {
		t.Errorf("after Advance(1m): %v", got)
	}
	c.Advance(-2 * time.Minute)
	if got := c.Now(); !got.Equal(start.Add(-time.Minute)) {
		t.Errorf("after Advance(-2m): %v", got)
	}
	c.Set(start)
	if got := c.Now(); !got.Equal(start) {
		t.Errorf("after Set: %v", got)
	}
}

func TestNextFence(t *testing.T) {
	now := time.UnixMicro(1_000_000)
	tests := []struct {
		last uint64
		now  time.Time
		want uint64
	}{
		{0, now, 1_000_000},         // a fresh key starts at the clock
		{1_000_000, now, 1_000_001}, // two grants in one microsecond
		{5_000_000, now, 5_000_001}, // the clock went back: the counter carries the order
		{7, time.Unix(0, 0), 8},     // no usable clock
		{7, time.UnixMicro(-5), 8},  // before the epoch
		{999_999, now.Add(time.Second), 2_000_000},
	}
	for _, tc := range tests {
		if got := core.NextFence(tc.last, tc.now); got != tc.want {
			t.Errorf("NextFence(%d, %d µs) = %d, want %d", tc.last, tc.now.UnixMicro(), got, tc.want)
		}
	}
}

func TestSnapshotInUse(t *testing.T) {
	s := core.Snapshot{Leases: []core.LeaseInfo{{Permits: 2}, {Permits: 3}}}
	if s.InUse() != 5 {
		t.Errorf("InUse = %d, want 5", s.InUse())
	}
}

func register(t *testing.T, wl *core.Waitlist, key string, permits int) core.Waiter {
	t.Helper()
	w, err := wl.Register(context.Background(), core.AcquireRequest{Key: key, Permits: permits})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	default:
		t.Fatal("a new waiter did not start woken: a release just before Register would be missed")
	}
	return w
}

func pending(ws ...core.Waiter) []bool {
	got := make([]bool, len(ws))
	for i, w := range ws {
		select {
		case <-w.C():
			got[i] = true
		default:
		}
	}
	return got
}

func TestWaitlistWakesInOrderWithinFreedPermits(t *testing.T) {
	var wl core.Waitlist
	a, b, c := register(t, &wl, "k", 1), register(t, &wl, "k", 2), register(t, &wl, "k", 1)
	other := register(t, &wl, "other", 1)
	wl.Notify("k", 3)
	if got := pending(a, b, c, other); got[0] != true || got[1] != true || got[2] || got[3] {
		t.Errorf("3 permits freed woke %v, want a and b only", got)
	}
	wl.Notify("k", 1) // a and b were drained above and are still enrolled: a is first again
	if got := pending(a, b, c); !got[0] || got[1] || got[2] {
		t.Errorf("1 permit freed woke %v, want a only", got)
	}
}

func TestWaitlistWakesWhoFitsFirst(t *testing.T) {
	var wl core.Waitlist
	big, small1, small2 := register(t, &wl, "k", 3), register(t, &wl, "k", 1), register(t, &wl, "k", 1)
	wl.Notify("k", 1)
	if got := pending(big, small1, small2); got[0] || !got[1] || got[2] {
		t.Errorf("1 permit freed woke %v, want the first that fits, not the big one that would be refused", got)
	}
	small1.Close(false)
	small2.Close(false)
	wl.Notify("k", 1)
	if got := pending(big); !got[0] {
		t.Errorf("with nobody fitting, the head was not woken")
	}
}

func TestWaitlistCloseForwardsEveryWake(t *testing.T) {
	var wl core.Waitlist
	a, b, c := register(t, &wl, "k", 1), register(t, &wl, "k", 1), register(t, &wl, "k", 1)
	wl.Notify("k", 1)
	<-a.C()           // a takes its wake and starts trying
	wl.Notify("k", 1) // a second release: a, first in line and not pending, is woken again
	a.Close(true)     // a gives up holding one taken and one pending wake
	if got := pending(b, c); !got[0] || !got[1] {
		t.Errorf("a's two wakes reached %v, want both b and c", got)
	}
}

func TestWaitlistSkipsWaitersAlreadyWoken(t *testing.T) {
	var wl core.Waitlist
	a, b := register(t, &wl, "k", 1), register(t, &wl, "k", 1)
	wl.Notify("k", 1)
	wl.Notify("k", 1)
	if got := pending(a, b); !got[0] || !got[1] {
		t.Errorf("two single releases woke %v, want both", got)
	}
}

func TestWaitlistClosePassesUnusedWake(t *testing.T) {
	var wl core.Waitlist
	a, b, c := register(t, &wl, "k", 1), register(t, &wl, "k", 1), register(t, &wl, "k", 1)
	wl.Notify("k", 1)
	a.Close(false) // a wake still pending in C is passed on
	if got := pending(b, c); !got[0] || got[1] {
		t.Errorf("after a closed with a pending wake: %v, want b woken", got)
	}
	b.Close(true) // b had taken its wake and gave up without trying
	if got := pending(c); !got[0] {
		t.Errorf("b's unused wake did not reach c")
	}
	c.Close(false)
	c.Close(true) // a second Close does nothing
	if n := wl.Len("k"); n != 0 {
		t.Errorf("Len = %d after every waiter closed", n)
	}
}

func TestWaitlistWakeAll(t *testing.T) {
	var wl core.Waitlist
	a, b := register(t, &wl, "k", 1), register(t, &wl, "j", 1)
	wl.WakeAll()
	if got := pending(a, b); !got[0] || !got[1] {
		t.Errorf("WakeAll woke %v", got)
	}
}

func TestWaitlistWakeOneKey(t *testing.T) {
	var wl core.Waitlist
	a, b, c := register(t, &wl, "k", 1), register(t, &wl, "k", 1), register(t, &wl, "j", 1)
	wl.Wake("k")
	if got := pending(a, b, c); !got[0] || !got[1] || got[2] {
		t.Errorf("Wake(k) woke %v, want both waiters on k and none on j", got)
	}
}

func TestWaitlistReliability(t *testing.T) {
	var wl core.Waitlist
	a := register(t, &wl, "k", 1)
	if !a.Reliable() {
		t.Fatal("a new Waitlist's waiter is not reliable")
	}
	wl.SetReliable(false)
	if got := pending(a); !got[0] || a.Reliable() {
		t.Errorf("going down: woken %v, reliable %v; want woken and unreliable", got[0], a.Reliable())
	}
	wl.SetReliable(false)
	if got := pending(a); got[0] {
		t.Errorf("no change in reliability woke the waiter")
	}
	wl.SetReliable(true)
	if got := pending(a); !got[0] || !a.Reliable() {
		t.Errorf("coming back: woken %v, reliable %v; want woken and reliable", got[0], a.Reliable())
	}
}

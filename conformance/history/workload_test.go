package history

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// TestLossIsDueAtTheDeadlineOrWhenAnInFlightReleaseReturns: a loss reported more than the
// allowance after the lease's deadline is late, unless the holder's own Release, begun in time,
// was still in flight at the deadline; then it is due when that Release returned.
func TestLossIsDueAtTheDeadlineOrWhenAnInFlightReleaseReturns(t *testing.T) {
	dl := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return dl.Add(time.Duration(n) * time.Millisecond) }
	const allow = 50 * time.Millisecond
	release := func(holder string, call, ret int) Op {
		return Op{Kind: Release, Key: "k", Holder: holder, Call: ms(call), Return: ms(ret)}
	}
	for _, c := range []struct {
		name string
		at   int // when the loss was reported, ms after the deadline
		ops  []Op
		late time.Duration // 0: on time
	}{
		{name: "at the deadline", at: 30},
		{name: "after the deadline", at: 300, late: 300 * time.Millisecond},
		{name: "a Release in flight across the deadline", at: 810, ops: []Op{release("a", -10, 800)}},
		{name: "long after a Release in flight across the deadline", at: 900, ops: []Op{release("a", -10, 800)}, late: 100 * time.Millisecond},
		{name: "a Release begun after the allowance", at: 530, ops: []Op{release("a", 500, 520)}, late: 530 * time.Millisecond},
		{name: "a Release that returned before the deadline", at: 300, ops: []Op{release("a", -20, -10)}, late: 300 * time.Millisecond},
		{name: "another holder's Release", at: 810, ops: []Op{release("b", -10, 800)}, late: 810 * time.Millisecond},
		{name: "a Release that returned after the report", at: 300, ops: []Op{release("a", -10, 800)}, late: 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := lateLosses([]loss{{key: "k", holder: "a", at: ms(c.at), deadline: dl}}, c.ops, allow)
			var want []time.Duration
			if c.late != 0 {
				want = []time.Duration{c.late}
			}
			if !slices.Equal(got, want) {
				t.Errorf("late = %v, want %v", got, want)
			}
		})
	}
}

// deadlineLease is a lease that knows only its deadline, which is all a loss event needs here.
type deadlineLease struct {
	core.Lease
	deadline time.Time
}

func (l deadlineLease) Deadline() time.Time { return l.deadline }

// TestCheckIsSafeBesideAReportStillComingIn: a lease's timer may report its loss, and a call its
// return, after Run has returned, while Check reads the figures (a data race under -race
// otherwise).
func TestCheckIsSafeBesideAReportStillComingIn(t *testing.T) {
	w := &Workload{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			now := time.Now()
			w.late(now)
			w.event(primitives.Event{Kind: primitives.EventLost, Key: "k", Holder: "h", Lease: deadlineLease{deadline: now}})
		}
	}()
	for range 5 {
		w.Check(t, false)
	}
	<-done
}

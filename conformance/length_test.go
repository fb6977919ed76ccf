package conformance

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// fixedClock is a harness whose clock the suite may move; the length tests make no Store.
type fixedClock struct{}

func (fixedClock) NewStore(t *testing.T) core.Store {
	t.Fatal("the suite's length is decided without a Store")
	return nil
}
func (fixedClock) Advance(time.Duration) bool { return true }

// TestSuiteLengthComesFromWithSoakNotTheEnvironment: the load checks run at their soak length
// when the driver's test passes WithSoak(true), and at their usual length otherwise, whatever
// LEASEHOLD_SOAK (Leasehold's own switch) says in the environment of a third party's test run.
func TestSuiteLengthComesFromWithSoakNotTheEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("-short sets the check of calls cut short to 300 ms whatever WithSoak says")
	}
	for _, env := range []string{"", "1"} {
		t.Setenv("LEASEHOLD_SOAK", env)
		for _, tc := range []struct {
			opts   []Option
			rounds int
			run    time.Duration
		}{
			{nil, 20, time.Second},
			{[]Option{WithSoak(false)}, 20, time.Second},
			{[]Option{WithSoak(true)}, 40, 3 * time.Second},
		} {
			s := newSuite(fixedClock{}, tc.opts)
			if got := s.stressRounds(); got != tc.rounds {
				t.Errorf("LEASEHOLD_SOAK=%q, %d options (soak %v): stress rounds %d, want %d", env, len(tc.opts), s.soak, got, tc.rounds)
			}
			if got := s.cutShortLength(); got != tc.run {
				t.Errorf("LEASEHOLD_SOAK=%q, %d options (soak %v): calls cut short for %v, want %v", env, len(tc.opts), s.soak, got, tc.run)
			}
		}
	}
}

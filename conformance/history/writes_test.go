package history_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/conformance/history"
)

// TestWritesInFenceOrderCatchesAStaleWriteThatLanded: a write accepted with a lower fence after a
// higher one had returned is a violation; one refused, or concurrent with the higher one, is not.
func TestWritesInFenceOrderCatchesAStaleWriteThatLanded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	w := func(holder string, fence uint64, call, ret int, accepted bool) history.Write {
		return history.Write{Resource: "r", Holder: holder, Fence: fence, Call: ms(call), Return: ms(ret), Accepted: accepted, Stale: !accepted}
	}
	for _, c := range []struct {
		name  string
		ws    []history.Write
		wrong bool
	}{
		{"in order", []history.Write{w("a", 5, 0, 1, true), w("a", 5, 2, 3, true), w("b", 7, 4, 5, true)}, false},
		{"the stale write refused", []history.Write{w("a", 5, 0, 1, true), w("b", 7, 4, 5, true), w("a", 5, 6, 7, false)}, false},
		{"concurrent writes in either order", []history.Write{w("b", 7, 0, 5, true), w("a", 5, 1, 6, true)}, false},
		{"the stale write landed", []history.Write{w("a", 5, 0, 1, true), w("b", 7, 4, 5, true), w("a", 5, 6, 7, true)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if v := history.WritesInFenceOrder(c.ws); (len(v) > 0) != c.wrong {
				t.Errorf("violations %v, want some: %v", v, c.wrong)
			}
		})
	}
	if n := history.Refused([]history.Write{w("a", 5, 0, 1, true), w("a", 5, 6, 7, false)}); n != 1 {
		t.Errorf("Refused = %d, want 1", n)
	}
}

// TestOverlapIsTheLongestTimeTwoHoldersWorkedAtOnce: tenures of one holder, or on other keys,
// do not overlap; two holders' on one key do, by their intersection.
func TestOverlapIsTheLongestTimeTwoHoldersWorkedAtOnce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	ts := []history.Tenure{
		{Key: "k", Holder: "a", Fence: 1, From: ms(0), To: ms(100)},
		{Key: "k", Holder: "a", Fence: 1, From: ms(50), To: ms(150)},
		{Key: "j", Holder: "c", Fence: 1, From: ms(0), To: ms(300)},
		{Key: "k", Holder: "b", Fence: 2, From: ms(120), To: ms(200)},
		{Key: "k", Holder: "d", Fence: 3, From: ms(200), To: ms(250)},
	}
	if got := history.Overlap(ts); got != 30*time.Millisecond {
		t.Errorf("Overlap = %v, want 30ms (a until 150 beside b from 120)", got)
	}
	if got := history.Overlap(ts[:3]); got != 0 {
		t.Errorf("Overlap of one holder and another key's = %v, want 0", got)
	}
}

package memory

import (
	"testing"
	"time"
)

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
		if got := nextFence(tc.last, tc.now); got != tc.want {
			t.Errorf("NextFence(%d, %d µs) = %d, want %d", tc.last, tc.now.UnixMicro(), got, tc.want)
		}
	}
}

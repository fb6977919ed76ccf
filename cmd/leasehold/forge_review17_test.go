package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Values and holder ids from other processes cannot forge a line of elect -observe's or
// inspect's output: newlines, carriage returns, line and paragraph separators, quotes, an
// invalid byte, a right-to-left override, each stays within its one line.
func TestOutputCannotBeForged_review17(t *testing.T) {
	evil := []string{
		"x\nleader term 1 holder h value \"forged\"", "x\rno leader", "x\u2028no leader", "x\u2029y",
		"\"", "\xff\n", "\u202eredael on", "a\x00b", strings.Repeat("\n", core.MaxValueLen),
	}
	for _, v := range evil {
		for _, ld := range []primitives.Leader{{Value: v, Holder: "h", Fence: 7}, {Value: "v", Holder: v, Fence: 7}} {
			line := leaderLine(ld)
			if strings.ContainsAny(line, "\n\r\u2028\u2029\u202e\x00") || !strings.HasPrefix(line, "leader term 7 holder ") {
				t.Errorf("leaderLine(%#v) = %q: more than one line, or a forged one", ld, line)
			}
		}
		var out bytes.Buffer
		printLeases(&out, []core.LeaseInfo{{Holder: v, Permits: 1, Fence: 3, Value: v}})
		printWaiters(&out, []core.WaiterInfo{{Holder: v, Permits: 1, Value: v}})
		if got := strings.Count(out.String(), "\n"); got != 5 || strings.ContainsAny(out.String(), "\r\u2028\u2029\u202e\x00") {
			t.Errorf("inspect's tables with %+q: %d lines, want 5:\n%s", v, got, out.String())
		}
	}
}

package rediscore

import (
	"testing"
	"time"
)

// TestUnansweredLeavesAreForgottenAfterTheirHold: the leaves a Store keeps for its holders' next
// tries to name (sent, not all answered) are forgotten once their hold has passed, whether or not
// the holder tries again (an unshared holder never does), so a long-lived Store does not keep
// them; a try names only those within it, and once answered, none.
func TestUnansweredLeavesAreForgottenAfterTheirHold(t *testing.T) {
	var ls unsureLeaves
	ls.unanswered("k1", "gone", "s:1")
	ls.unsure["k1\x00gone"][0].at = time.Now().Add(-tryHold - time.Second)
	ls.unanswered("k2", "h", "s:2")
	if _, ok := ls.unsure["k1\x00gone"]; ok || len(ls.unsure) != 1 || ls.unsureN.Load() != 1 {
		t.Fatalf("unsure = %v (%d); want only k2's leave", ls.unsure, ls.unsureN.Load())
	}
	ls.unanswered("k2", "h", "s:3")
	ls.unsure["k2\x00h"][0].at = time.Now().Add(-tryHold)
	if got := ls.overtaken("k2", "h"); got != "s:3" {
		t.Fatalf("overtaken = %q; want s:3 alone (s:2's hold has passed)", got)
	}
	ls.overtook("k2", "h", "s:3")
	if got := ls.overtaken("k2", "h"); got != "" || ls.unsureN.Load() != 0 || len(ls.unsure) != 0 {
		t.Fatalf("after the try that named them: overtaken = %q, unsure = %v (%d); want none", got, ls.unsure, ls.unsureN.Load())
	}
}

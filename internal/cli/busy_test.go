package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// The busy line names who holds the key: the first holder by its value, else by its id, and how
// many more; a key closed by a lock delay names the holder whose lease expired.
func TestBusyLineNamesTheHolders(t *testing.T) {
	long := strings.Repeat("x", 200)
	for _, tc := range []struct {
		name string
		snap core.Snapshot
		want string
	}{
		{"by value", core.Snapshot{Leases: []core.LeaseInfo{{Holder: "h1", Value: "host-a pid 42: make deploy"}}},
			`"k" is busy (held by "host-a pid 42: make deploy")`},
		{"by id without a value", core.Snapshot{Leases: []core.LeaseInfo{{Holder: "0f3c"}}},
			`"k" is busy (held by holder 0f3c)`},
		{"an id that could forge a line", core.Snapshot{Leases: []core.LeaseInfo{{Holder: "a\nb"}}},
			`"k" is busy (held by holder "a\nb")`},
		{"several", core.Snapshot{Leases: []core.LeaseInfo{{Holder: "h1", Value: "v1"}, {Holder: "h2"}, {Holder: "h3"}}},
			`"k" is busy (held by "v1" and 2 more)`},
		{"a long value, cut", core.Snapshot{Leases: []core.LeaseInfo{{Holder: "h1", Value: long}}},
			`"k" is busy (held by "` + long[:holderValueWidth-3] + `"…)`},
		{"closed by a lock delay", core.Snapshot{Delayed: []core.DelayInfo{{Holder: "h1", Permits: 1, Left: 1500 * time.Millisecond}}},
			`"k" is busy (closed 1.5s more by the lock delay of holder h1, whose lease expired unreleased)`},
		{"free by now", core.Snapshot{}, `"k" is busy`},
	} {
		c := runConfig{key: "k"}
		if got := c.busy(holdersText(tc.snap)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	c := runConfig{key: "job", elect: true}
	if got, want := c.busy(holdersText(core.Snapshot{Leases: []core.LeaseInfo{{Holder: "h", Value: "leader-1"}}})), `"job" has a leader (held by "leader-1")`; got != want {
		t.Errorf("elect: %q, want %q", got, want)
	}
}

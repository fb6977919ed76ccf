package cli

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestInspectShowsTheWaitingLine(t *testing.T) {
	useMemoryStore(t)
	command, open := gate(t)
	holder := start(t, append([]string{"run", "-redis", memoryRedis, "-key", "gpu", "-limit", "3", "-permits", "2", "-value", "trainer", "--"}, command...)...)
	inspectUntil(t, "gpu", "1 holder(s), 2 permit(s) in use, 1 free of 3", `"trainer"`, "no one waiting")

	first := start(t, "run", "-redis", memoryRedis, "-key", "gpu", "-limit", "3", "-permits", "3", "-value", "big job", "--", "true")
	inspectUntil(t, "gpu", "1 waiting, first served first:")
	second := start(t, "run", "-redis", memoryRedis, "-key", "gpu", "-limit", "3", "-value", "small\njob", "--", "true")
	out := inspectUntil(t, "gpu", "2 waiting, first served first:")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 7 {
		t.Fatalf("inspect: %d lines, want 7:\n%s", len(lines), out)
	}
	if f := strings.Fields(lines[4]); strings.Join(f, " ") != "# holder permits value" {
		t.Errorf("header of the line: %q\n%s", lines[4], out)
	}
	for i, want := range []struct{ place, permits, value string }{{"1", "3", `"big job"`}, {"2", "1", `"small\njob"`}} {
		f := strings.Fields(lines[5+i])
		if len(f) < 4 || f[0] != want.place || f[2] != want.permits || !strings.HasSuffix(lines[5+i], "  "+want.value) {
			t.Errorf("waiter %s: %q, want place %s, %s permit(s), value %s\n%s", want.place, lines[5+i], want.place, want.permits, want.value, out)
		}
	}

	// The small job waits behind the big one, which waits for the holder: first in line, first served.
	open()
	if code := holder.exit(t); code != exitOK {
		t.Errorf("holder: exit %d, stderr %q", code, holder.err.String())
	}
	for _, w := range []*started{first, second} {
		if code := w.exit(t); code != exitOK {
			t.Errorf("waiter: exit %d, stderr %q", code, w.err.String())
		}
	}
	inspectUntil(t, "gpu", "0 holder(s)", "no one waiting")
}

func TestInspectFitsIn100Columns(t *testing.T) {
	store := useMemoryStore(t)
	long := strings.Repeat("a long value, ", 70)
	sem, err := primitives.NewSemaphore(store, "wide", 2, primitives.WithTTL(time.Minute),
		primitives.WithHolder("a holder id with spaces\nand a newline"), primitives.WithValue(long))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := sem.Acquire(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Release(t.Context()) })
	waiter := start(t, "run", "-redis", memoryRedis, "-key", "wide", "-limit", "2", "-value", long+"\n", "--", "true")
	out := inspectUntil(t, "wide", "1 waiting")
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if n := utf8.RuneCountInString(line); n > tableWidth {
			t.Errorf("a line of %d runes: %q", n, line)
		}
	}
	if strings.Count(out, `"a long value, a lon`) != 2 || strings.Count(out, `"…`) != 2 ||
		!strings.Contains(out, `"a holder id with spaces\nand a newline"`) {
		t.Errorf("want both values cut with an ellipsis and the holder id quoted:\n%s", out)
	}
	waiter.cancel()
	if code := waiter.exit(t); code != exitInterrupted {
		t.Errorf("waiter interrupted: exit %d, want %d", code, exitInterrupted)
	}
}

// A key with a newline in it cannot forge a line of inspect's output: the header quotes it.
func TestInspectQuotesAnOddKey(t *testing.T) {
	store := useMemoryStore(t)
	key := "a\nb: 9 holder(s)"
	mu, err := primitives.NewMutex(store, key, primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := mu.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Release(t.Context()) })
	out := inspectUntil(t, key, "1 holder(s)")
	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, `"a\nb: 9 holder(s)": 1 holder(s)`) {
		t.Errorf("inspect's header does not quote the key: %q", first)
	}
}

// TestInspectShowsAKeyClosedByALockDelay: a lease in its lock delay counts as closed, not free,
// and is listed with when it opens.
func TestInspectShowsAKeyClosedByALockDelay(t *testing.T) {
	snap := core.Snapshot{Limit: 3, Leases: []core.LeaseInfo{{Holder: "b", Permits: 1, Fence: 9, TTL: time.Minute}},
		Delayed: []core.DelayInfo{{Holder: "a", Permits: 2, Fence: 7, Left: 1500 * time.Millisecond}}}
	var out strings.Builder
	printHeader(&out, "gpu", snap, 0)
	printDelayed(&out, snap.Delayed, time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	want := "gpu: 1 holder(s), 1 permit(s) in use, 2 closed by a lock delay, 0 free of 3\n" +
		"closed by a lock delay (leases that expired unreleased):\n"
	if got := out.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, "12:00:01.500Z") ||
		!strings.Contains(strings.Join(strings.Fields(got), " "), "a 2 7 1.5s") {
		t.Errorf("inspect of a key with a lock delay:\n%s\nwant it to begin\n%s and list a's 2 permits, fence 7, opening in 1.5s at 12:00:01.500Z", got, want)
	}
}

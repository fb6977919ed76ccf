package cli

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestDefaultValueNamesHostPidAndCommand(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	got := defaultValue([]string{"make", "deploy", "MSG=it's done", ""})
	want := fmt.Sprintf(`%s pid %d: make deploy 'MSG=it'\''s done' ''`, host, os.Getpid())
	if got != want {
		t.Errorf("defaultValue = %q, want %q", got, want)
	}
}

func TestFitValueCutsOnARuneBoundary(t *testing.T) {
	if s := strings.Repeat("x", core.MaxValueLen); fitValue(s) != s {
		t.Errorf("a value of exactly %d bytes was cut", core.MaxValueLen)
	}
	for _, s := range []string{strings.Repeat("x", 2000), strings.Repeat("é", 600), "a" + strings.Repeat("日本", 300)} {
		got := fitValue(s)
		if len(got) > core.MaxValueLen || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") ||
			!strings.HasPrefix(s, strings.TrimSuffix(got, "…")) || len(got) < core.MaxValueLen-3 {
			t.Errorf("fitValue of %d bytes: %d bytes, valid UTF-8 %v, ends %q", len(s), len(got), utf8.ValidString(got), got[max(len(got)-8, 0):])
		}
	}
}

func TestQuoteValue(t *testing.T) {
	tests := []struct {
		v     string
		width int
		want  string
	}{
		{"make deploy", 20, `"make deploy"`},
		{"", 20, `""`},
		{"a\nleader term 9", 40, `"a\nleader term 9"`},
		{"abcdefghij", 8, `"abcde"…`},
		{"ab\ncd", 6, `"ab"…`}, // an escape is never split
		{"héllo wörld", 8, `"héllo"…`},
		{"\xff\xfeok", 20, `"\xff\xfeok"`},
	}
	for _, tc := range tests {
		got := quoteValue(tc.v, tc.width)
		if got != tc.want || utf8.RuneCountInString(got) > tc.width {
			t.Errorf("quoteValue(%q, %d) = %q, want %q", tc.v, tc.width, got, tc.want)
		}
	}
}

func TestValueUsageErrors(t *testing.T) {
	long := strings.Repeat("v", core.MaxValueLen+1)
	tests := []struct {
		args []string
		want string // in the one line on stderr
	}{
		{[]string{"run", "-redis", "127.0.0.1:6379", "-key", "k", "-value", long, "--", "true"}, "leasehold run: -value: 1025 bytes, at most 1024"},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-key", "k", "-value=" + strings.Repeat("é", 513), "--", "true"}, "leasehold run: -value: 1026 bytes, at most 1024"},
		{[]string{"elect", "-redis", "127.0.0.1:6379", "k", long, "--", "true"}, "leasehold elect: VALUE: 1025 bytes, at most 1024"},
	}
	checkUsageErrors(t, tests)
}

func TestRunKeepsItsValueForInspect(t *testing.T) {
	store := useMemoryStore(t)
	host, _ := os.Hostname()
	command, open := gate(t)

	holder := start(t, append([]string{"run", "-redis", memoryRedis, "-key", "deploy", "--"}, command...)...)
	prefix := fmt.Sprintf("%s pid %d: ", host, os.Getpid())
	out := inspectUntil(t, "deploy", "1 holder(s)", `"`+prefix)
	want := prefix + `sh -c 'until [ -e "$1" ]; do sleep 0.01; done' sh ` + command[len(command)-1]
	snap, err := store.Inspect(t.Context(), "deploy")
	if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Value != want {
		t.Errorf("the store keeps %+v, %v; want one lease of value %q", snap.Leases, err, want)
	}
	row := strings.Split(out, "\n")[2]
	if cell := row[strings.Index(row, `"`):]; cell != quoteValue(want, utf8.RuneCountInString(cell)) || utf8.RuneCountInString(row) > tableWidth {
		t.Errorf("inspect shows\n%s\nwant the value %q, quoted, cut to fit %d columns", out, want, tableWidth)
	}
	open()
	if code := holder.exit(t); code != exitOK {
		t.Fatalf("holder: exit %d, stderr %q", code, holder.err.String())
	}

	command, open = gate(t)
	holder = start(t, append([]string{"run", "-redis", memoryRedis, "-key", "deploy", "-value", "release 7\nleader term 1", "--"}, command...)...)
	out = inspectUntil(t, "deploy", "1 holder(s)", `"release 7\nleader term 1"`)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "leader term") {
			t.Errorf("a newline in -value made a line of its own:\n%s", out)
		}
	}
	open()
	holder.exit(t)

	command, open = gate(t)
	holder = start(t, append([]string{"run", "-redis", memoryRedis, "-key", "deploy", "-value", "", "--"}, command...)...)
	out = inspectUntil(t, "deploy", "1 holder(s)")
	if !strings.HasSuffix(out, "  \"\"\nno one waiting\n") {
		t.Errorf("-value \"\": inspect shows\n%s\nwant the empty value \"\" and no one waiting", out)
	}
	open()
	holder.exit(t)
}

// Values and holder ids from other processes cannot forge a line of elect -observe's or
// inspect's output: newlines, carriage returns, line and paragraph separators, quotes, an
// invalid byte, a right-to-left override, each stays within its one line.
func TestOutputCannotBeForged(t *testing.T) {
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

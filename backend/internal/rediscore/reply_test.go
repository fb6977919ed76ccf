package rediscore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/core"
)

// TestParseAcquire: each reply of the acquire script decodes to its result, and a holder that
// holds another number of permits is core.ErrInvalid saying both numbers.
func TestParseAcquire(t *testing.T) {
	for _, tc := range []struct {
		reply any
		want  string // the result and last fence, or the end of the error's text
	}{
		{int64(42), "{Granted:true Fence:42 TTL:0s RetryAfter:0s} 0"},
		{int64(0), "unexpected script reply: 0"},
		{[]any{int64(1), int64(42)}, "unexpected script reply: [1 42]"},
		{[]any{int64(0), int64(1500), int64(41)}, "{Granted:false Fence:0 TTL:0s RetryAfter:1.5s} 41"},
		{[]any{int64(0), int64(0)}, "{Granted:false Fence:0 TTL:0s RetryAfter:0s} 0"},
		{[]any{int64(-1), int64(2)}, ": holder already holds 2 permits, asked for 1"},
		{[]any{int64(1)}, "unexpected script reply: [1]"},
		{"OK", "unexpected script reply: OK"},
	} {
		res, last, err := parseAcquire(tc.reply, 1, 1)
		got := fmt.Sprintf("%+v %d", res, last)
		if err != nil {
			got = err.Error() // a sentinel's text comes first
		}
		if !strings.HasSuffix(got, tc.want) {
			t.Errorf("parseAcquire(%v) = %s, want %s", tc.reply, got, tc.want)
		}
	}
	if _, _, err := parseAcquire([]any{int64(-1), int64(2)}, 1, 1); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("a holder holding other permits: %v, want ErrInvalid", err)
	}
}

// TestParseRelease: a release's reply is the permits freed alone, or with the grants the line was
// given; anything else is an unexpected reply.
func TestParseRelease(t *testing.T) {
	for _, tc := range []struct {
		reply any
		want  string
	}{
		{int64(1), "true []"},
		{int64(0), "false []"},
		{[]any{int64(2), "w", int64(7)}, "true [{holder:w fence:7}]"},
		{[]any{int64(1), "w"}, "error"},
		{"OK", "error"},
	} {
		held, grants, err := parseRelease(tc.reply)
		got := fmt.Sprintf("%v %+v", held, grants)
		if err != nil {
			got = "error"
		}
		if got != tc.want {
			t.Errorf("parseRelease(%v) = %s, want %s", tc.reply, got, tc.want)
		}
	}
}

// TestParseMessage: a channel message is netstrings of holders, each followed by a fence; any
// other text is an unexpected reply.
func TestParseMessage(t *testing.T) {
	for payload, want := range map[string]string{
		"":                     "[]",
		"1:a5 ":                "[{holder:a fence:5}]",
		"3:a b7 2:{}9 ":        "[{holder:a b fence:7} {holder:{} fence:9}]",
		"4:a:b 1 ":             "[{holder:a:b  fence:1}]",
		"x:a5 ":                "error",
		"9:a5 ":                "error",
		"1:a5":                 "error",
		"1:ax ":                "error",
		"18446744073709551616": "error",
	} {
		gs, err := parseMessage(payload)
		got := fmt.Sprintf("%+v", gs)
		if gs == nil {
			got = "[]"
		}
		if err != nil {
			got = "error"
			if !errors.Is(err, errReply) {
				t.Errorf("parseMessage(%q): %v, want errReply", payload, err)
			}
		}
		if got != want {
			t.Errorf("parseMessage(%q) = %s, want %s", payload, got, want)
		}
	}
}

// TestParseInspect: the leases come with their values, in fence order, then the leases in their
// lock delay in fence order, then the waiters head first; a count that does not fit the reply is
// an unexpected reply.
func TestParseInspect(t *testing.T) {
	snap, err := parseInspect([]any{int64(2), int64(2), int64(2), "b", int64(1), int64(9), int64(500), "", "a", int64(1), int64(7), int64(900), "a\nb",
		"d1", int64(1), int64(5), int64(3000), "d0", int64(1), int64(3), int64(4000),
		"w0", int64(2), "first", "w1", int64(1), ""})
	want := "{Limit:2 Leases:[{Holder:a Permits:1 Fence:7 TTL:900ms Value:a\nb} {Holder:b Permits:1 Fence:9 TTL:500ms Value:}] " +
		"Waiters:[{Holder:w0 Permits:2 Value:first} {Holder:w1 Permits:1 Value:}] " +
		"Delayed:[{Holder:d0 Permits:1 Fence:3 Left:4s} {Holder:d1 Permits:1 Fence:5 Left:3s}]}"
	if got := fmt.Sprintf("%+v", snap); err != nil || got != want {
		t.Errorf("parseInspect = %s, %v; want %s", got, err, want)
	}
	for _, bad := range []any{[]any{int64(0)}, []any{int64(0), int64(1), int64(0), "a"}, []any{int64(0), int64(0), int64(0), "w"},
		[]any{int64(0), int64(0), int64(1), "d", int64(1), int64(3)}, []any{int64(0), int64(0), int64(-1)}, "OK"} {
		if _, err := parseInspect(bad); !errors.Is(err, errReply) {
			t.Errorf("parseInspect(%v): %v, want errReply", bad, err)
		}
	}
}

// TestParseExtend: the value follows the numbers; a reply of old scripts without it reads "".
func TestParseExtend(t *testing.T) {
	for reply, want := range map[*[]any]string{
		{int64(1), int64(2), int64(7), int64(3), "v"}: "{Permits:2 Fence:7 Limit:3 Value:v}",
		{int64(1), int64(2), int64(7), int64(3)}:      "{Permits:2 Fence:7 Limit:3 Value:}",
	} {
		res, err := parseExtend(*reply)
		if got := fmt.Sprintf("%+v", res); err != nil || got != want {
			t.Errorf("parseExtend(%v) = %s, %v; want %s", *reply, got, err, want)
		}
	}
	if _, err := parseExtend([]any{int64(0)}); !errors.Is(err, core.ErrLost) {
		t.Errorf("a lease not held: %v, want ErrLost", err)
	}
}

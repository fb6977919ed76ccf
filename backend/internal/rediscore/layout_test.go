package rediscore

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/core"
)

// Tests of layout.go: the Redis keys and channels of a key, byte for byte, in one hash slot.

// TestBracesInKeysStayInOneSlot: every Redis key and channel of a key shares one hash tag, and
// no two keys share a Redis key, whatever braces and escapes they hold.
func TestBracesInKeysStayInOneSlot(t *testing.T) {
	l, _ := newLayout(defaultPrefix)
	seen := map[string]string{}
	for _, key := range []string{"a", "{a}", "a}", "}a", "{", "}", "%7B", "a%7D", "{a}:leases", "x}:leases", "leasehold:{a}"} {
		for _, k := range append(l.keys(key), l.channel(key, "store")) {
			if other, dup := seen[k]; dup {
				t.Errorf("keys %q and %q share the Redis key %q", key, other, k)
			}
			seen[k] = key
		}
		keys := l.keys(key)
		tag := func(k string) string {
			i := strings.Index(k, "{")
			j := strings.Index(k[i+1:], "}")
			return k[i+1 : i+1+j]
		}
		for _, k := range keys[1:] {
			if tag(k) != tag(keys[0]) || tag(k) == "" {
				t.Errorf("key %q: hash tags %q and %q differ or are empty", key, tag(keys[0]), tag(k))
			}
		}
	}
	if _, err := newLayout("bad{"); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("prefix with a brace: err = %v, want ErrInvalid", err)
	}
}

// TestLayoutNamesAreByteExact: the Redis keys, the changed channel and a Store's channel of a
// key are the prefix, "{", the key with '%', '{' and '}' escaped, "}:" and the name, byte for
// byte, whatever the key and prefix hold (empty, escapes, braces, UTF-8 or not, NUL, long).
func TestLayoutNamesAreByteExact(t *testing.T) {
	escape := func(key string) string {
		var b []byte
		for i := 0; i < len(key); i++ {
			switch key[i] {
			case '%':
				b = append(b, "%25"...)
			case '{':
				b = append(b, "%7B"...)
			case '}':
				b = append(b, "%7D"...)
			default:
				b = append(b, key[i])
			}
		}
		return string(b)
	}
	golden := map[[2]string]string{
		{"", ""}:                      "{}:",
		{"leasehold:", "a{b}%c"}:      "leasehold:{a%7Bb%7D%25c}:",
		{"p%:", "%7B"}:                "p%:{%257B}:",
		{"☃:", "☃{"}:                  "☃:{☃%7B}:",
		{"x", "}}{{%%"}:               "x{%7D%7D%7B%7B%25%25}:",
		{"", "\xff\x00{\n"}:           "{\xff\x00%7B\n}:",
		{"leasehold:", "a}:leases"}:   "leasehold:{a%7D:leases}:",
		{"a:b:", "{leasehold:{a}}:x"}: "a:b:{%7Bleasehold:%7Ba%7D%7D:x}:",
	}
	keys := []string{"", "a", "%", "{", "}", "{}", "%7B", "a{b}%c", "☃", "\xff\xfe", "\x00", strings.Repeat("{%}é", 3000)}
	for _, prefix := range []string{"", "leasehold:", "p%:", "☃:", "x", "a:b:"} {
		l, err := newLayout(prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			golden[[2]string{prefix, key}] = prefix + "{" + escape(key) + "}:"
		}
		for pk, tag := range golden {
			if pk[0] != prefix {
				continue
			}
			key := pk[1]
			got := l.keys(key)
			want := []string{tag + "lease", tag + "queue", tag + "waiting", tag + "left"}
			if len(got) != len(want) {
				t.Fatalf("prefix %q key %q: %d keys, want %d", prefix, key, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("prefix %q key %q: key %d is %q, want %q", prefix, key, i, got[i], want[i])
				}
			}
			if got := l.changed(key); got != tag+"changed" {
				t.Errorf("prefix %q key %q: changed channel %q, want %q", prefix, key, got, tag+"changed")
			}
			if got := l.channel(key, "s%{"); got != tag+"granted:s%{" {
				t.Errorf("prefix %q key %q: channel %q, want %q", prefix, key, got, tag+"granted:s%{")
			}
		}
	}
}

// TestKeysAreTheConcatenations: keys gives the keys that the concatenations give, byte for
// byte, for any prefix and key, and the channels the scripts name after the lease hash (its name
// without "lease", then "changed", or "granted:" and a store id) are the layout's.
func TestKeysAreTheConcatenations(t *testing.T) {
	for _, prefix := range []string{"", "leasehold:", "p%:", "☃:", "\x00"} {
		l, _ := newLayout(prefix)
		for _, key := range []string{"", "a", "%", "{", "}", "{}%", "☃", "\xff", "a}:leases", string(make([]byte, 5000))} {
			tag := l.tag(key)
			keys := l.keys(key)
			want := []string{tag + "lease", tag + "queue", tag + "waiting", tag + "left"}
			if len(keys) != len(want) {
				t.Fatalf("prefix %q key %q: keys %q", prefix, key, keys)
			}
			for i := range want {
				if keys[i] != want[i] {
					t.Errorf("prefix %q key %q: key %d %q, want %q", prefix, key, i, keys[i], want[i])
				}
			}
			base := strings.TrimSuffix(keys[0], "lease")
			if base+"changed" != l.changed(key) || base+"granted:s" != l.channel(key, "s") {
				t.Errorf("prefix %q key %q: channels %q, %q not named after %q", prefix, key, l.changed(key), l.channel(key, "s"), keys[0])
			}
		}
	}
}

package rediscore

import (
	"strings"
	"testing"
)

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

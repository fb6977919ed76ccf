package rediscore

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/core"
)

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

package rediscore

import "testing"

// TestNamesAreKeysAndChanged: names gives the keys and the changed channel that the
// concatenations give, byte for byte, for any prefix and key.
func TestNamesAreKeysAndChanged(t *testing.T) {
	for _, prefix := range []string{"", "leasehold:", "p%:", "☃:", "\x00"} {
		l, _ := newLayout(prefix)
		for _, key := range []string{"", "a", "%", "{", "}", "{}%", "☃", "\xff", "a}:leases", string(make([]byte, 5000))} {
			tag := l.tag(key)
			keys, changed := l.names(key)
			want := []string{tag + "lease", tag + "queue", tag + "waiting", tag + "left"}
			if len(keys) != len(want) || changed != tag+"changed" || changed != l.changed(key) {
				t.Fatalf("prefix %q key %q: names %q, %q", prefix, key, keys, changed)
			}
			for i := range want {
				if keys[i] != want[i] {
					t.Errorf("prefix %q key %q: key %d %q, want %q", prefix, key, i, keys[i], want[i])
				}
			}
			if got := argv(acquireScript, changed, []any{"x"}); len(got) != 2 || got[1] != tag+"changed" {
				t.Errorf("argv of acquire: %q", got)
			}
			if got := argv(watchScript, changed, []any{"x"}); len(got) != 1 {
				t.Errorf("argv of watch: %q", got)
			}
		}
	}
}

package rediscore

import (
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/core"
)

// defaultPrefix is the key prefix used unless a Store is given another.
const defaultPrefix = "leasehold:"

// layout maps resource keys to Redis keys and channels under a prefix.
type layout struct {
	prefix string
}

// newLayout returns the layout under prefix. The prefix must not contain '{' or '}', which would
// change the hash tag.
func newLayout(prefix string) (layout, error) {
	if strings.ContainsAny(prefix, "{}") {
		return layout{}, fmt.Errorf("%w: prefix %q: must not contain '{' or '}'", core.ErrInvalid, prefix)
	}
	return layout{prefix: prefix}, nil
}

var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func (l layout) tag(key string) string {
	return l.prefix + "{" + keyEscaper.Replace(key) + "}:"
}

// suffixes follow a resource key's tag: its four Redis keys, in the order the scripts take them
// (see common.lua), then its changed channel. The lease hash is "lease", not the "leases" sorted
// set of the layout before it, so that neither layout reads the other's leases as its own; the
// line's keys kept their names (see doc.go: the two must not share a prefix).
var suffixes = [...]string{"lease", "queue", "waiting", "left", "changed"}

// keys returns the Redis keys of a resource key, in the order the scripts take them.
func (l layout) keys(key string) []string {
	keys, _ := l.names(key)
	return keys
}

// names returns the Redis keys of a resource key, in the order the scripts take them, and its
// changed channel (see changed): slices of one string, so that a script call allocates two
// values for them, not six.
func (l layout) names(key string) (keys []string, changed string) {
	esc := keyEscaper.Replace(key)
	tag := len(l.prefix) + len(esc) + len("{}:")
	size := 0
	for _, s := range suffixes {
		size += tag + len(s)
	}
	var b strings.Builder
	b.Grow(size)
	for _, s := range suffixes {
		b.WriteString(l.prefix)
		b.WriteByte('{')
		b.WriteString(esc)
		b.WriteString("}:")
		b.WriteString(s)
	}
	all := b.String()
	keys = make([]string, len(suffixes)-1)
	for i, s := range suffixes {
		n := tag + len(s)
		if i < len(keys) {
			keys[i] = all[:n]
		} else {
			changed = all[:n]
		}
		all = all[n:]
	}
	return keys, changed
}

// channel returns the channel on which the Store with id store hears of leases on key granted to
// its waiters from the key's line.
func (l layout) channel(key, store string) string { return l.tag(key) + "granted:" + store }

// changed returns the channel on which the scripts announce, while some Store watches key, that
// its leases changed: shared by every Store under the prefix.
func (l layout) changed(key string) string { return l.tag(key) + "changed" }

// maxMs bounds every duration sent to a script: far above any TTL or wait a caller means
// (35,000 years), and far below 2^53, so that the scripts' arithmetic on doubles stays exact.
const maxMs = 1 << 50

// ms rounds a duration up to whole milliseconds, the server's resolution (a lease never ends
// before its TTL), and bounds it to [0, maxMs] without overflowing.
func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return min(int64(d/time.Millisecond)+min(int64(d%time.Millisecond), 1), maxMs)
}

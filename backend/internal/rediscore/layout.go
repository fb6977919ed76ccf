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
// (see common.lua). The scripts name the key's channels after the lease hash's name (see changed
// and channel): the tag, then what follows "lease".
var suffixes = [...]string{"lease", "queue", "waiting", "left"}

// keys returns the Redis keys of a resource key, in the order the scripts take them: slices of
// one string, so that a script call allocates one value for them, not four.
func (l layout) keys(key string) []string {
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
	keys := make([]string, len(suffixes))
	for i, s := range suffixes {
		n := tag + len(s)
		keys[i] = all[:n]
		all = all[n:]
	}
	return keys
}

// channel returns the channel on which the Store with id store hears of leases on key granted to
// its waiters from the key's line. The acquire script names it likewise from the lease hash's
// name and the try's id (see tryID and granted_channel in common.lua).
func (l layout) channel(key, store string) string { return l.tag(key) + "granted:" + store }

// changed returns the channel on which the scripts announce, while some Store watches key, that
// its leases changed: shared by every Store under the prefix. The scripts name it likewise from
// the lease hash's name (see call in common.lua).
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

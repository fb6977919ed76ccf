package rediscore

import (
	"hash/maphash"
	"slices"
	"sync/atomic"
)

// Call is one command the Store sends through its Adapter: a script call laid out as FCALL,
// EVALSHA and EVAL all take it (the command, the function or script, the number of keys, the
// keys, then the ARGV), or a command of no key.
type Call struct {
	// Args is the whole command: Head values, then Keys keys (strings), then the ARGV (strings,
	// and int, int64 and uint64 values to send in decimal). The Store never changes Args once
	// it has passed them on: an adapter may send Args as they are, and keep them.
	Args []any
	// Keys is the number of keys.
	Keys int
}

// Head is the number of values at the start of a script call's Args before its keys: the
// command, the function or script, and the number of keys.
const Head = 3

// Key returns the call's i-th key.
func (c Call) Key(i int) string { return c.Args[Head+i].(string) }

// ARGV returns the call's script arguments.
func (c Call) ARGV() []any { return c.Args[Head+c.Keys:] }

// call returns the Call of script on the key that n names, with ARGV a, and its head unset
// (see as).
func call(n *keyNames, a *argList) Call {
	args := make([]any, Head, Head+len(n.keys)+a.n)
	args = append(args, n.keys...)
	return Call{Args: append(args, a.values()...), Keys: len(n.keys)}
}

// as returns c sent as command cmd of name (a function, a SHA1 or a source): c itself, its head
// set, when nothing was sent of it yet or it was sent so; otherwise a copy, since an adapter may
// keep the Args it sent.
func (c Call) as(cmd string, name any) Call {
	switch {
	case c.Args[0] == nil:
	case c.Args[0] == cmd && c.Args[1] == name:
		return c
	default:
		c.Args = slices.Clone(c.Args)
	}
	c.Args[0], c.Args[1], c.Args[2] = cmd, name, c.Keys
	return c
}

// keyNames are a resource key's Redis keys, boxed once for the calls that send them.
type keyNames struct {
	key  string
	keys []any // the Redis keys (strings), in the order the scripts take them
}

// nameSlots is how many keys' names a Store keeps.
const nameSlots = 64

// nameCache keeps the names of the keys a Store used last, in a slot chosen by the key's hash, so
// that a call on a key used before makes and boxes none of them. An entry never changes once
// stored; another key's names replace it. Safe for concurrent use.
type nameCache struct {
	seed  maphash.Seed
	slots [nameSlots]atomic.Pointer[keyNames]
}

// get returns key's names in layout l.
func (c *nameCache) get(l layout, key string) *keyNames {
	slot := &c.slots[maphash.String(c.seed, key)%nameSlots]
	if n := slot.Load(); n != nil && n.key == key {
		return n
	}
	keys := l.keys(key)
	n := &keyNames{key: key, keys: make([]any, len(keys))}
	for i, k := range keys {
		n.keys[i] = k
	}
	slot.Store(n)
	return n
}

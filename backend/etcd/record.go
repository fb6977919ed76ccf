package etcd

import (
	"cmp"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The records of one key live under its base, prefix + escape(key) + "/":
//
//	l/<holder>  a lease: held while its etcd lease lives (the grant's, TTL rounded up to whole
//	            seconds), or, granted by the line and not yet taken, while the etcd lease of its
//	            grant lives: one nobody renews, of the TTL of the session its waiter's place was on
//	            (the shortest of them, shared by the grants of one transaction), so that a grant
//	            nobody takes (its waiter dead, gone, or its leave not getting through) ends by
//	            itself; it gets etcd leases, and a lock delay, of its own when taken
//	d/<holder>  a lease's lock delay: on an etcd lease of TTL + delay, renewed with the lease, so
//	            that it outlives an unreleased lease by the delay
//	w/<holder>  a place in the line, on its waiter's session; the line's order is the records'
//	            create revisions
const (
	kindLease = 'l'
	kindDelay = 'd'
	kindPlace = 'w'
)

// escape makes s safe as one element of an etcd key: '%' and '/' are written as %25 and %2F,
// so that no key's base is a prefix of another's.
func escape(s string) string {
	if !strings.ContainsAny(s, "%/") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescape reverses escape.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	s = strings.ReplaceAll(s, "%2F", "/")
	return strings.ReplaceAll(s, "%25", "%")
}

// rec is a record's value: what its request asked for.
type rec struct {
	idx            uint8 // a lease's index among the grants of the transaction that made it
	permits, limit int
	ttl, delay     time.Duration
	untaken        bool  // a lease the line granted, not yet taken by its holder
	fence          int64 // a delay record's lease's fence, or its index (below 1<<fenceShift)
	life           int64 // an untaken grant's: the whole seconds of the etcd lease it is on; a place's: its session's
	value          string
}

// request returns the request r keeps, on req's key and holder and with its Unshared and Wait:
// what waitline.Same compares (durations in the record's whole milliseconds).
func (r rec) request(req core.AcquireRequest) core.AcquireRequest {
	return core.AcquireRequest{Key: req.Key, Holder: req.Holder, Permits: r.permits, Limit: r.limit, TTL: r.ttl.Truncate(time.Millisecond),
		LockDelay: r.delay.Truncate(time.Millisecond), Value: r.value, Wait: req.Wait, Unshared: req.Unshared}
}

// fenceShift places a grant's index among its transaction's grants below the transaction's
// revision in its fence: a fence is revision<<fenceShift | index, so the grants one transaction
// makes (a release that serves several waiters) have fences of their own, above every fence of
// an earlier revision.
const fenceShift = 8

// maxGrants bounds the grants of one transaction (etcd takes at most 128 operations in one).
const maxGrants = 32

const recVersion = 2

// encode writes r as: the index byte (first, so that a transaction can compare it: a value
// starting with byte i is at least "i" and below "i+1"), a version byte, a flags byte, uvarints
// permits, limit, TTL and delay in milliseconds, fence and life, then the value's bytes as they
// are.
func (r rec) encode() string {
	b := make([]byte, 0, 3+6*binary.MaxVarintLen64+len(r.value))
	flags := byte(0)
	if r.untaken {
		flags |= 1
	}
	b = append(b, r.idx, recVersion, flags)
	b = binary.AppendUvarint(b, uint64(r.permits))
	b = binary.AppendUvarint(b, uint64(r.limit))
	b = binary.AppendUvarint(b, uint64(r.ttl/time.Millisecond))
	b = binary.AppendUvarint(b, uint64(r.delay/time.Millisecond))
	b = binary.AppendUvarint(b, uint64(r.fence))
	b = binary.AppendUvarint(b, uint64(r.life))
	return string(append(b, r.value...))
}

var errBadRecord = errors.New("etcd: a record under the prefix is not Leasehold's (written by another program, or a newer version)")

func decodeRec(b []byte) (rec, error) {
	if len(b) < 3 || b[1] != recVersion {
		return rec{}, errBadRecord
	}
	r := rec{idx: b[0], untaken: b[2]&1 != 0}
	b = b[3:]
	var v [6]uint64
	for i := range v {
		x, n := binary.Uvarint(b)
		if n <= 0 {
			return rec{}, errBadRecord
		}
		v[i], b = x, b[n:]
	}
	r.permits, r.limit = int(v[0]), int(v[1])
	r.ttl, r.delay = time.Duration(v[2])*time.Millisecond, time.Duration(v[3])*time.Millisecond
	r.fence, r.life = int64(v[4]), int64(v[5])
	r.value = string(b)
	return r, nil
}

// entry is one record of a key, as read.
type entry struct {
	rec
	holder string
	create int64 // the record's create revision: a lease's fence; a place's order in the line
	mod    int64
	lease  clientv3.LeaseID
}

// leaseFence is a lease record's fence: its create revision and its index.
func (e entry) leaseFence() int64 { return e.create<<fenceShift | int64(e.idx) }

// delayFence is a delay record's lease's fence: written in it, or, for a record made with its
// lease, from its own create revision and the index written in it.
func (e entry) delayFence() int64 {
	if e.fence >= 1<<fenceShift {
		return e.fence
	}
	return e.create<<fenceShift | e.fence
}

// state is a key's records at one revision.
type state struct {
	rev    int64
	seen   bool             // a copy of the Store's watch's records, not read from etcd just now
	leases map[string]entry // l/
	delays map[string]entry // d/
	line   []entry          // w/, in order
}

// keys names the records of one key.
type keys struct{ base string }

func (k keys) of(kind byte, holder string) string {
	return k.base + string(kind) + "/" + escape(holder)
}

// parse reads a record's kind and holder from its etcd key; ok is false for a key that is not
// one of the key's records.
func (k keys) parse(key []byte) (kind byte, holder string, ok bool) {
	rest, found := strings.CutPrefix(string(key), k.base)
	if !found || len(rest) < 2 || rest[1] != '/' {
		return 0, "", false
	}
	switch rest[0] {
	case kindLease, kindDelay, kindPlace:
		return rest[0], unescape(rest[2:]), true
	}
	return 0, "", false
}

func newState(rev int64) *state {
	return &state{rev: rev, leases: map[string]entry{}, delays: map[string]entry{}}
}

// readState builds a state from the key's records, as a range of its base returned them.
func (k keys) readState(rev int64, kvs []*mvccpb.KeyValue) (*state, error) {
	st := newState(rev)
	for _, kv := range kvs {
		if err := st.put(k, kv); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// clone returns a copy of st that shares nothing it could change.
func (st *state) clone() *state {
	c := &state{rev: st.rev, seen: true, leases: make(map[string]entry, len(st.leases)), delays: make(map[string]entry, len(st.delays)),
		line: slices.Clone(st.line)}
	maps.Copy(c.leases, st.leases)
	maps.Copy(c.delays, st.delays)
	return c
}

// put applies a record as written; a key outside the key's records is ignored.
func (st *state) put(k keys, kv *mvccpb.KeyValue) error {
	kind, holder, ok := k.parse(kv.Key)
	if !ok {
		return nil
	}
	r, err := decodeRec(kv.Value)
	if err != nil {
		return err
	}
	e := entry{rec: r, holder: holder, create: kv.CreateRevision, mod: kv.ModRevision, lease: clientv3.LeaseID(kv.Lease)}
	switch kind {
	case kindLease:
		st.leases[holder] = e
	case kindDelay:
		st.delays[holder] = e
	case kindPlace:
		i := slices.IndexFunc(st.line, func(p entry) bool { return p.holder == holder })
		if i >= 0 {
			st.line[i] = e // a place written again keeps its create revision, so its order
		} else {
			n, _ := slices.BinarySearchFunc(st.line, e.create, func(p entry, c int64) int { return cmp.Compare(p.create, c) })
			st.line = slices.Insert(st.line, n, e)
		}
	}
	return nil
}

// remove applies a record's deletion.
func (st *state) remove(k keys, key []byte) {
	kind, holder, ok := k.parse(key)
	if !ok {
		return
	}
	switch kind {
	case kindLease:
		delete(st.leases, holder)
	case kindDelay:
		delete(st.delays, holder)
	case kindPlace:
		st.line = slices.DeleteFunc(st.line, func(p entry) bool { return p.holder == holder })
	}
}

// limit returns the key's limit — that of its leases, lock delays and places — and whether
// anything holds or waits for the key.
func (st *state) limit() (int, bool) {
	for _, e := range st.leases {
		return e.limit, true
	}
	for _, e := range st.delays {
		return e.limit, true
	}
	for _, e := range st.line {
		return e.limit, true
	}
	return 0, false
}

// used returns the permits the key's leases hold and its lock delays keep closed.
func (st *state) used() int {
	n := 0
	for _, e := range st.leases {
		n += e.permits
	}
	for h, e := range st.delays {
		if _, ok := st.leases[h]; !ok {
			n += e.permits
		}
	}
	return n
}

// head returns the place the line serves next, skipping places whose holder holds a lease (a
// place the holder's own grant made moot), and whether it is free to be granted now: its permits
// fit and no lock delay of its holder's keeps it waiting. used is the permits held.
func (st *state) head(used int) (entry, bool, bool) {
	for _, p := range st.line {
		if _, ok := st.leases[p.holder]; ok {
			continue
		}
		if _, delayed := st.delays[p.holder]; delayed {
			return p, false, true
		}
		return p, used+p.permits <= p.limit, true
	}
	return entry{}, false, false
}

// next returns the holder of the place the line serves next, if the line would grant it now:
// its permits fit and no lock delay of its holder's holds it back. Only the head is woken: the
// others behind it would be refused while it waits, and it is woken again, as the head, once
// the one before it is granted.
func (st *state) next() (string, bool) {
	h, free, ok := st.head(st.used())
	if !ok || !free {
		return "", false
	}
	return h.holder, true
}

// leasesOf returns the etcd leases of holder's lease and delay records that are the grant's own,
// to recycle once the records are gone or moved. An untaken grant's etcd lease is recycled only
// when no other record of the key is on it (the grants of one transaction share it).
func (st *state) leasesOf(holder string) []spare {
	var ids []spare
	if e, ok := st.leases[holder]; ok && (!e.untaken || st.soleOn(e.lease, holder)) {
		secs := seconds(e.ttl)
		if e.untaken {
			secs = e.life
		}
		ids = append(ids, spare{e.lease, secs})
	}
	if d, ok := st.delays[holder]; ok {
		ids = append(ids, spare{d.lease, seconds(d.ttl + d.delay)})
	}
	return ids
}

// soleOn reports whether holder's lease record is the only record of the key on the etcd lease
// id, and id is an untaken grant's of known life.
func (st *state) soleOn(id clientv3.LeaseID, holder string) bool {
	if e := st.leases[holder]; e.life <= 0 {
		return false
	}
	for h, e := range st.leases {
		if h != holder && e.lease == id {
			return false
		}
	}
	for _, e := range st.delays {
		if e.lease == id {
			return false
		}
	}
	for _, e := range st.line {
		if e.lease == id {
			return false
		}
	}
	return true
}

func (st *state) place(holder string) (entry, bool) {
	i := slices.IndexFunc(st.line, func(p entry) bool { return p.holder == holder })
	if i < 0 {
		return entry{}, false
	}
	return st.line[i], true
}

// entryBytes is an estimate of what one record costs in a state besides its holder and value:
// the entry itself and its place in a map or slice.
const entryBytes = int(unsafe.Sizeof(entry{})) + 48

// size estimates the memory st holds.
func (st *state) size() int {
	n := 0
	for _, e := range st.leases {
		n += entryBytes + len(e.holder) + len(e.value)
	}
	for _, e := range st.delays {
		n += entryBytes + len(e.holder) + len(e.value)
	}
	for _, e := range st.line {
		n += entryBytes + len(e.holder) + len(e.value)
	}
	return n
}

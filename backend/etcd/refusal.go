package etcd

import (
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// refusal is what a refused try with a Wait saw, kept for its Register: the key's records when
// it decided (nil when not kept: the Store watched the key already, or the Store keeps more
// than maxSeedBytes of them; Register then reads), their estimated size, and the revision its
// place was written at.
type refusal struct {
	st     *state
	size   int
	placed int64
	at     time.Time
}

// The refusals a Store keeps for their Register are bounded: at most maxRefusals, the records
// they keep at most maxSeedBytes together (a line of a thousand places is some 100 KiB), and one
// older than refusalKept goes first when room is needed, among the refusals or the records (a
// Register follows its refusal at once; one that comes later reads the key).
const (
	maxRefusals  = 1024
	maxSeedBytes = 1 << 20
	refusalKept  = 10 * time.Second
)

// placeID names a holder's place on a key (a struct, not a joined string: keys and holders may
// hold any byte).
type placeID struct{ key, holder string }

func refusalID(key, holder string) placeID { return placeID{key, holder} }

// refusals are the refusals a Store keeps for their Register, by place.
type refusals struct {
	mu        sync.Mutex
	byPlace   map[placeID]refusal
	seedBytes int // the estimated size of the records they keep
}

// noteRefusal keeps what a refused try with a Wait saw, for its Register.
func (s *Store) noteRefusal(req core.AcquireRequest, st *state, placed int64) {
	// Register starts the key's watch from these records; with a watch, it has no use for them.
	watched := s.watches.get(req.Key) != nil
	s.refusals.note(refusalID(req.Key, req.Holder), st, placed, !watched)
}

// note keeps the refusal of the place id, which saw st and was placed at revision placed, and
// st with it when withRecords is set and there is room.
func (rs *refusals) note(id placeID, st *state, placed int64, withRecords bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byPlace == nil {
		rs.byPlace = map[placeID]refusal{}
	}
	rs.takeLocked(id)
	if len(rs.byPlace) >= maxRefusals {
		rs.dropOldLocked()
		for id := range rs.byPlace {
			if len(rs.byPlace) < maxRefusals {
				break
			}
			rs.takeLocked(id)
		}
	}
	r := refusal{placed: placed, at: time.Now()}
	if withRecords {
		n := st.size()
		if rs.seedBytes+n > maxSeedBytes {
			rs.dropOldLocked()
		}
		if rs.seedBytes+n <= maxSeedBytes {
			r.st, r.size = st, n
			rs.seedBytes += n
		}
	}
	rs.byPlace[id] = r
}

// take removes and returns the refusal kept for id.
func (rs *refusals) take(id placeID) (refusal, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.takeLocked(id)
}

// dropOldLocked drops the refusals kept longer than refusalKept. rs.mu must be held.
func (rs *refusals) dropOldLocked() {
	for id, r := range rs.byPlace {
		if time.Since(r.at) > refusalKept {
			rs.takeLocked(id)
		}
	}
}

// takeLocked removes and returns the refusal kept for id. rs.mu must be held.
func (rs *refusals) takeLocked(id placeID) (refusal, bool) {
	r, ok := rs.byPlace[id]
	if ok {
		delete(rs.byPlace, id)
		rs.seedBytes -= r.size
	}
	return r, ok
}

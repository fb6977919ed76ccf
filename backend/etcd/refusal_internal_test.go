package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
)

// TestRefusalsKeptForRegisterAreBounded: refused tries with a Wait whose callers do not Register
// (a waiter's later tries, or callers gone) on keys with lines of a thousand places keep at
// most 1024 refusals and about a MiB of the keys' records among them, however many there are;
// on a key the Store watches already, a refusal keeps none of its records.
func TestRefusalsKeptForRegisterAreBounded(t *testing.T) {
	t.Parallel()
	s, err := New(etcdtest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	long := newState(1)
	for i := range 1000 {
		long.line = append(long.line, entry{rec: rec{permits: 1, limit: 1, value: "host-a pid 4242"}, holder: fmt.Sprint("w", i), create: int64(i + 2)})
	}
	for i := range 3000 {
		s.noteRefusal(core.AcquireRequest{Key: fmt.Sprint(t.Name(), i%1500), Holder: fmt.Sprint("h", i)}, long, 1002)
	}
	s.refusals.mu.Lock()
	n, records := len(s.refusals.byPlace), 0
	for _, r := range s.refusals.byPlace {
		if r.st != nil {
			records += len(r.st.line)
		}
	}
	s.refusals.mu.Unlock()
	if n > 1024 {
		t.Errorf("%d refusals kept, want at most 1024", n)
	}
	if most := (1 << 20) / int(unsafe.Sizeof(entry{})); records > most {
		t.Errorf("%d records kept by refusals, want at most %d (a MiB)", records, most)
	}

	key := t.Name() + "watched"
	w, err := s.Watch(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s.noteRefusal(core.AcquireRequest{Key: key, Holder: "h"}, long, 1002)
	s.refusals.mu.Lock()
	r := s.refusals.byPlace[refusalID(key, "h")]
	s.refusals.mu.Unlock()
	if r.st != nil || r.placed != 1002 {
		t.Errorf("a refusal on a key the Store watches kept %v records, placed %d; want none, placed 1002", r.st != nil, r.placed)
	}
}

// refusedWaiter has holder w of s refused on key k, which h of another Store holds, with a Wait:
// its place is in the line, its refusal kept for its Register. It returns the request and a
// release of h.
func refusedWaiter(t *testing.T, s *Store) (core.AcquireRequest, func()) {
	t.Helper()
	o, err := New(etcdtest.Shared(t).Client(t), WithPrefix(s.prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	h := granted(t, o, grantOf("k", "h", time.Minute, true))
	r := grantOf("k", "w", time.Minute, true)
	r.Wait = time.Minute
	if res, err := s.Acquire(context.Background(), r); err != nil || res.Granted {
		t.Fatalf("Acquire(w) = %+v, %v; want a refusal", res, err)
	}
	return r, func() {
		if ok, err := o.Release(context.Background(), core.ReleaseRequest{Key: "k", Holder: "h", Fence: h.Fence}); err != nil || !ok {
			t.Fatalf("Release(h) = %v, %v", ok, err)
		}
	}
}

// registerAndTake registers r's waiter, checks whether it starts woken, then releases the
// holder in its way: the waiter is woken by the line's grant, and its next try takes it.
func registerAndTake(t *testing.T, s *Store, r core.AcquireRequest, release func(), wokenAtOnce bool) {
	t.Helper()
	w, err := s.Register(context.Background(), r)
	if err != nil {
		t.Fatalf("Register(w): %v", err)
	}
	defer w.Close()
	select {
	case <-w.C():
		if !wokenAtOnce {
			t.Fatal("the waiter started woken though the key is held and it is not granted")
		}
	default:
		if wokenAtOnce {
			t.Fatal("the waiter did not start woken though its refusal was not kept")
		}
	}
	release()
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the line's grant")
	}
	granted(t, s, r)
}

// TestRegisterAfterItsRefusalWasCrowdedOut: a refusal older than refusalKept goes first when
// more than maxRefusals are kept; its waiter's Register then reads the key and starts woken,
// and the line's grant reaches it.
func TestRegisterAfterItsRefusalWasCrowdedOut(t *testing.T) {
	t.Parallel()
	s, _, _ := lossyStore(t)
	r, release := refusedWaiter(t, s)
	id := refusalID(r.Key, r.Holder)
	s.refusals.mu.Lock()
	ref, ok := s.refusals.byPlace[id]
	ref.at = time.Now().Add(-2 * refusalKept)
	s.refusals.byPlace[id] = ref
	s.refusals.mu.Unlock()
	if !ok {
		t.Fatal("w's refusal was not kept")
	}
	for i := range maxRefusals {
		s.noteRefusal(core.AcquireRequest{Key: fmt.Sprint("crowd", i), Holder: "c"}, newState(1), 1)
	}
	s.refusals.mu.Lock()
	_, kept := s.refusals.byPlace[id]
	s.refusals.mu.Unlock()
	if kept {
		t.Fatal("w's old refusal was kept past maxRefusals newer ones")
	}
	registerAndTake(t, s, r, release, true)
}

// TestRegisterOfARefusalKeptWithoutRecords: with maxSeedBytes of records kept already, a
// refusal keeps only the revision of its place; its waiter's Register reads the key, does not
// start woken while the key is held, and the line's grant reaches it.
func TestRegisterOfARefusalKeptWithoutRecords(t *testing.T) {
	t.Parallel()
	s, _, _ := lossyStore(t)
	s.refusals.mu.Lock()
	s.refusals.seedBytes = maxSeedBytes
	s.refusals.mu.Unlock()
	r, release := refusedWaiter(t, s)
	s.refusals.mu.Lock()
	ref, ok := s.refusals.byPlace[refusalID(r.Key, r.Holder)]
	s.refusals.seedBytes = 0
	s.refusals.mu.Unlock()
	if !ok || ref.st != nil || ref.placed == 0 {
		t.Fatalf("w's refusal kept: %v, with records %v, placed %d; want it kept without records, placed", ok, ref.st != nil, ref.placed)
	}
	registerAndTake(t, s, r, release, false)
}

// TestOldRefusalsMakeRoomForTheRecordsOfNewOnes: refusals older than refusalKept whose callers
// never registered, on long lines, hold maxSeedBytes of records among them; a new refusal's
// records are kept all the same (the old ones go), so that its Register reads nothing.
func TestOldRefusalsMakeRoomForTheRecordsOfNewOnes(t *testing.T) {
	t.Parallel()
	s, err := New(etcdtest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	long := newState(1)
	for i := range 1000 {
		long.line = append(long.line, entry{rec: rec{permits: 1, limit: 1, value: "host-a pid 4242"}, holder: fmt.Sprint("w", i), create: int64(i + 2)})
	}
	for i := 0; ; i++ {
		s.noteRefusal(core.AcquireRequest{Key: fmt.Sprint("old", i), Holder: "h"}, long, 1002)
		s.refusals.mu.Lock()
		r := s.refusals.byPlace[refusalID(fmt.Sprint("old", i), "h")]
		s.refusals.mu.Unlock()
		if r.st == nil {
			break // the records kept are at their bound
		}
	}
	s.refusals.mu.Lock()
	for id, r := range s.refusals.byPlace {
		r.at = r.at.Add(-2 * refusalKept)
		s.refusals.byPlace[id] = r
	}
	s.refusals.mu.Unlock()
	s.noteRefusal(core.AcquireRequest{Key: "new", Holder: "h"}, long, 1002)
	s.refusals.mu.Lock()
	r := s.refusals.byPlace[refusalID("new", "h")]
	n, bytes := len(s.refusals.byPlace), s.refusals.seedBytes
	s.refusals.mu.Unlock()
	if r.st == nil {
		t.Errorf("a new refusal kept no records while %d refusals older than %v kept %d bytes of them", n-1, refusalKept, bytes)
	}
}

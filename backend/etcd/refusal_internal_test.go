package etcd

import (
	"fmt"
	"testing"
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
	s.mu.Lock()
	n, records := len(s.refused), 0
	for _, r := range s.refused {
		if r.st != nil {
			records += len(r.st.line)
		}
	}
	s.mu.Unlock()
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
	s.mu.Lock()
	r := s.refused[refusalID(key, "h")]
	s.mu.Unlock()
	if r.st != nil || r.placed != 1002 {
		t.Errorf("a refusal on a key the Store watches kept %v records, placed %d; want none, placed 1002", r.st != nil, r.placed)
	}
}

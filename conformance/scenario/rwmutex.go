package scenario

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// RWStress proves that writers exclude everyone and readers only writers, under load: workers
// goroutines take rounds leases each on the RWMutexes in turn (each a view of one key, as
// separate processes would have), a write lease one time in four, held for hold. It fails t if
// a lease has the wrong permits or a writer ever held with a reader or another writer, and
// returns the most readers that held at once (the caller checks that readers shared the key).
func RWStress(t testing.TB, rws []*primitives.RWMutex, workers, rounds int, hold time.Duration) (peakReaders int) {
	t.Helper()
	ctx := context.Background()
	// A reader enters with one permit, a writer with all of them: any company of a writer
	// takes the count past the limit.
	all := conformance.NewOccupancy(primitives.MaxReaders)
	readers := conformance.NewOccupancy(0)
	var reads, writes atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		rw := rws[w%len(rws)]
		wg.Go(func() {
			for range rounds {
				write := rand.N(4) == 0
				acquire, permits := rw.AcquireRead, 1
				if write {
					acquire, permits = rw.Acquire, primitives.MaxReaders
				}
				l, err := acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if l.Permits() != permits {
					t.Errorf("lease of %d permits, want %d", l.Permits(), permits)
				}
				leave := all.Enter(permits)
				leaveR := func() {}
				if write {
					writes.Add(1)
				} else {
					reads.Add(1)
					leaveR = readers.Enter(1)
				}
				time.Sleep(hold)
				leaveR()
				leave()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if v := all.Violations(); len(v) > 0 {
		t.Errorf("a writer held with others %d times, first: %v", len(v), v[0])
	}
	t.Logf("%d reads, %d writes; at most %d readers at once", reads.Load(), writes.Load(), readers.Peak())
	return readers.Peak()
}

// WriterNotStarved checks that readers cannot starve a writer. It runs a stream of overlapping
// readers on rd (a new one every 5ms, each holding for 20ms, so that the key is read-held
// throughout) and, once it flows, a writer's Acquire on wr, whose acquire timeout is the bound:
// give wr one of a few seconds. It fails the test unless the writer gets the lock while the stream
// goes on, every reader that began to acquire after waiting(ctx) reported the writer's wait (in the
// line, or by its intent) is granted after the writer (a higher fence), and no writer holds with a
// reader. A run whose stream faltered under load, letting the writer in without waiting, tested
// nothing and is run again, up to three times in all.
func WriterNotStarved(t testing.TB, rd, wr *primitives.RWMutex, waiting func(context.Context) bool) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		why := writerNotStarvedOnce(t, rd, wr, waiting)
		switch {
		case why == "":
			return
		case attempt == 3:
			t.Errorf("%s, in each of %d runs", why, attempt)
			return
		}
		t.Logf("run %d tested nothing (%s): again", attempt, why)
	}
}

// writerNotStarvedOnce runs WriterNotStarved's scenario once. It fails t on a violation, and
// returns why the run tested nothing when the readers did not keep the key held ("" when they
// did).
func writerNotStarvedOnce(t testing.TB, rd, wr *primitives.RWMutex, waiting func(context.Context) bool) string {
	t.Helper()
	ctx := context.Background()
	s := startReadStream(t, rd)
	defer s.halt()
	poll.Until(t, "the readers' stream started", func() bool { return s.granted.Load() >= 10 })

	begin := time.Now()
	l := s.writer(wr, waiting)
	if l == nil {
		return ""
	}
	leave := s.occ.Enter(primitives.MaxReaders)
	t.Logf("the writer got the lock after %v, with %d reads granted so far", time.Since(begin), s.granted.Load())
	var why string
	if !s.seen.Load() {
		why = "the writer was never seen waiting: the readers did not keep the key held"
	}
	// The stream goes on while the writer holds: those readers must wait for it.
	before := s.granted.Load()
	time.Sleep(30 * time.Millisecond)
	if n := s.granted.Load() - before; n != 0 {
		t.Errorf("%d reads granted while the writer held", n)
	}
	leave()
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
	// Readers come again after the writer.
	poll.Until(t, "reads granted after the writer's release", func() bool { return s.granted.Load() >= before+3 })
	s.halt()
	if s.checkAfter(l.Fence()) == 0 && why == "" {
		why = "no reader began while the writer waited: the stream stopped"
	}
	return why
}

// readStream is WriterNotStarved's stream of overlapping readers: a new one every 5ms, each
// holding for 20ms, until halt.
type readStream struct {
	t        testing.TB
	rd       *primitives.RWMutex
	occ      *conformance.Occupancy
	granted  atomic.Int64
	seen     atomic.Bool // the writer was seen waiting
	stop     chan struct{}
	spawning sync.WaitGroup
	halt     func() // stops the stream and waits for its readers to end; idempotent

	mu    sync.Mutex
	reads []streamRead
}

// streamRead is one read the stream was granted.
type streamRead struct {
	late  bool // began after the writer was seen waiting
	fence uint64
}

func startReadStream(t testing.TB, rd *primitives.RWMutex) *readStream {
	s := &readStream{t: t, rd: rd, occ: conformance.NewOccupancy(primitives.MaxReaders), stop: make(chan struct{})}
	s.halt = sync.OnceFunc(func() {
		close(s.stop)
		s.spawning.Wait()
	})
	s.spawning.Go(s.spawn)
	return s
}

// spawn starts a reader every 5ms until the stream stops.
func (s *readStream) spawn() {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		late := s.seen.Load()
		s.spawning.Go(func() { s.read(late) })
	}
}

// read takes a read lease, holds it for 20ms and releases it.
func (s *readStream) read(late bool) {
	ctx := context.Background()
	l, err := s.rd.AcquireRead(ctx)
	if err != nil {
		s.t.Error(err)
		return
	}
	leave := s.occ.Enter(1)
	s.granted.Add(1)
	s.mu.Lock()
	s.reads = append(s.reads, streamRead{late, l.Fence()})
	s.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	leave()
	l.Release(ctx)
}

// writer has wr acquire under the stream, noting when waiting first reports it waits, and
// returns its lease: nil if its ctx ended (the test did).
func (s *readStream) writer(wr *primitives.RWMutex, waiting func(context.Context) bool) core.Lease {
	got := make(chan core.Lease, 1)
	begin := time.Now()
	GoBackground(s.t, func(ctx context.Context) {
		l, err := wr.Acquire(ctx)
		if err != nil && ctx.Err() == nil {
			s.t.Errorf("the writer under a stream of readers: %v (after %v)", err, time.Since(begin))
		}
		got <- l
	})
	for {
		select {
		case l := <-got:
			return l
		case <-time.After(time.Millisecond):
			if !s.seen.Load() && waiting(context.Background()) {
				s.seen.Store(true)
			}
		}
	}
}

// checkAfter fails the test if a reader that began after the writer was seen waiting was
// granted before the writer (whose fence is fence), or a writer held with readers; it returns
// how many readers began after the writer was seen waiting. The stream must have halted.
func (s *readStream) checkAfter(fence uint64) (late int) {
	for _, r := range s.reads {
		if r.late {
			late++
		}
		if r.late && r.fence < fence {
			s.t.Errorf("a reader that came after the writer waited was granted before it (fence %d < writer's %d)", r.fence, fence)
		}
	}
	if v := s.occ.Violations(); len(v) > 0 {
		s.t.Errorf("a writer held with readers: %v", v)
	}
	return late
}

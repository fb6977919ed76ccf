// Package scenario holds the scenarios that check the primitives (RWMutex, Election, MultiLock)
// on any core.Store: exclusion and sharing under stress, a writer not starved by readers, the
// order of a store's line, what Inspect reports, one leader at a time, handovers, what Observe
// sees, MultiLocks over overlapping keys that never deadlock, and a failed MultiLock acquire that
// leaves nothing held.
//
// Each scenario is an exported function that takes a testing.TB and the primitives (or the
// constructors of them) it runs on, made by the caller on the Store under test, and fails the
// test when the behaviour it proves does not hold. The memory backend, Redlock, PostgreSQL and
// both Redis drivers run them from their own tests; a third-party driver's author can run them on
// theirs the same way, next to conformance.Run:
//
//	func TestElectionOneLeaderAtATime(t *testing.T) {
//		var els []*primitives.Election
//		for range 4 {
//			els = append(els, scenario.MustElection(t, newStore(t), "lead", primitives.WithRetryInterval(time.Millisecond)))
//		}
//		scenario.OneLeaderAtATime(t, els, 25)
//	}
//
// Give each primitive a Store of its own where the backend allows it, as separate processes
// have. Some scenarios need a store with a line (core.Snapshot's Waiters): their doc comments
// say so. The scenarios wait with real time (each bound is 10s unless it says otherwise) and
// start goroutines that end before the test does (see GoBackground); MultiLocksNeverDeadlock
// waits DeadlockBound for a round before it calls the wait a deadlock. Fault injection belongs
// to the backend's own tests: this package imports no backend (its own tests run the scenarios
// on the memory store).
package scenario

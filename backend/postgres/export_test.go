package postgres

// SetTries makes the Store name its tries that wait with next (tests: a try given up in flight).
func (s *Store) SetTries(next func() int64) { s.newTry = next }

// LeaveTry leaves key's line as a try with id try that failed in flight does, and waits for it.
func (s *Store) LeaveTry(key, holder string, try int64) {
	s.leave(key, holder, &try)
	s.leaves.Wait()
}

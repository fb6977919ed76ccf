package goredis

// Queued returns how many of s's calls wait in its queue for a pipeline.
func Queued(s *Store) int {
	if s.d.batch == nil {
		return 0
	}
	s.d.batch.mu.Lock()
	defer s.d.batch.mu.Unlock()
	return len(s.d.batch.queue)
}

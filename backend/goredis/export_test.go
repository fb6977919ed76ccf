package goredis

// Queued returns how many of s's calls wait in its queue for a pipeline.
func Queued(s *Store) int {
	if s.a.batch == nil {
		return 0
	}
	s.a.batch.mu.Lock()
	defer s.a.batch.mu.Unlock()
	return len(s.a.batch.queue)
}

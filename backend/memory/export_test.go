package memory

// Keys returns how many keys the store keeps state for.
func (s *Store) Keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

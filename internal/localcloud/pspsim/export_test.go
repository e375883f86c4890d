package pspsim

// InFlight reports whether key is claimed by a request still running: a
// test-only view, so tests can wait for "the first request is in flight"
// without sleeping.
func (s *Sim) InFlight(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	return e != nil && !e.done
}

// Crash ends the simulator as a killed process ends: nothing more is
// written (no final sync), and the file and its lock are let go.
func (s *Sim) Crash() {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.mu.Lock()
		j := s.journal
		s.journal = nil
		s.mu.Unlock()
		if j != nil {
			j.f.Close()
			j.lock.Close()
		}
	})
}

// SetCompactEvery changes how many journal lines a running simulator
// appends before it compacts its state file, and returns the old value.
func SetCompactEvery(n uint64) uint64 {
	old := compactEvery
	compactEvery = n
	return old
}

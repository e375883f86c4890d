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

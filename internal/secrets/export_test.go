package secrets

// EndpointOf is the endpoint s calls.
func EndpointOf(s *Store) string { return s.endpoint }

package home

// SetMaxSeen bounds the router's version cache for a test; the returned
// func restores it.
func SetMaxSeen(n int) func() {
	old := maxSeen
	maxSeen = n
	return func() { maxSeen = old }
}

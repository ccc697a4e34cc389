package bench

// Ratings is how many ratings were added.
func (t *Truth) Ratings() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

package metaroce

// regrow returns a ring of size slots (a power of two, more than the
// window spans) holding old's entries of the window [base, next) under the
// same sequence numbers: every ring in the engine (messages, chunks,
// receives, scoreboard entries) indexes by the number's low bits, so a
// grown ring moves each entry to its new slot.
func regrow[T any](old []T, size int, base, next uint32) []T {
	ring := make([]T, size)
	if len(old) > 0 {
		for s := base; s != next; s++ {
			ring[s&uint32(size-1)] = old[s&uint32(len(old)-1)]
		}
	}
	return ring
}

package capture

// recent is a map by packet id that keeps only the last max ids put in
// it: a ring of the ids in insertion order evicts the oldest, so a long
// capture's memory stays bounded whatever a lab's traffic does.
type recent[V any] struct {
	m    map[uint64]V
	ring []uint64
	at   int
	max  int
}

func newRecent[V any](max int) recent[V] {
	return recent[V]{m: map[uint64]V{}, max: max}
}

func (r *recent[V]) get(id uint64) (V, bool) {
	v, ok := r.m[id]
	return v, ok
}

// put sets id's value; a new id past max evicts the oldest one.
func (r *recent[V]) put(id uint64, v V) {
	if _, ok := r.m[id]; !ok {
		if len(r.ring) < r.max {
			r.ring = append(r.ring, id)
		} else {
			delete(r.m, r.ring[r.at])
			r.ring[r.at] = id
			r.at = (r.at + 1) % r.max
		}
	}
	r.m[id] = v
}

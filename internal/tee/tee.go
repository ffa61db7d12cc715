// Package tee joins optional listeners (observers, tracers) into one: nil
// listeners drop out, so a run with none keeps its zero-cost nil path, and a
// single listener is returned unwrapped. Each listener interface keeps its
// own fan-out type, since Go cannot forward an interface's methods
// generically.
package tee

// Join returns the zero T if every x is the zero T, the one non-zero x as
// it is, or fanout applied to the non-zero xs in order.
func Join[T comparable](fanout func([]T) T, xs ...T) T {
	var zero T
	var keep []T
	for _, x := range xs {
		if x != zero {
			keep = append(keep, x)
		}
	}
	switch len(keep) {
	case 0:
		return zero
	case 1:
		return keep[0]
	}
	return fanout(keep)
}

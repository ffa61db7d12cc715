package metaroce

import "math/bits"

// pathSet is a set of path numbers (a sending path's id, or its index on
// its plane): ids are uint8, so at most 256.
type pathSet [4]uint64

func (s *pathSet) add(i int)    { s[i>>6&3] |= 1 << (i & 63) }
func (s *pathSet) remove(i int) { s[i>>6&3] &^= 1 << (i & 63) }

// len returns how many paths s holds.
func (s *pathSet) len() int {
	return bits.OnesCount64(s[0]) + bits.OnesCount64(s[1]) + bits.OnesCount64(s[2]) + bits.OnesCount64(s[3])
}

// next returns the smallest member greater than k, or -1.
func (s *pathSet) next(k int) int {
	if k++; k >= 256 {
		return -1
	}
	w := k >> 6
	if word := s[w&3] >> (k & 63); word != 0 {
		return k + bits.TrailingZeros64(word)
	}
	for w++; w < 4; w++ {
		if s[w] != 0 {
			return w<<6 | bits.TrailingZeros64(s[w])
		}
	}
	return -1
}

// after returns the member after k in cyclic order: the smallest one
// greater than k, else the smallest; -1 if s is empty.
func (s *pathSet) after(k int) int {
	if i := s.next(k); i >= 0 {
		return i
	}
	return s.next(-1)
}

// pathSel is what spares the per-packet and per-ACK code a scan of every
// path (a connection has 128 or more, of which a window of a few dozen
// packets uses a few):
//
//   - pick[port] is path choice on the port's plane. Its cand holds the
//     plane's paths that are not spare, as setSpare last marked them (the
//     only writer of spare): every path that takes new data is one, so
//     pickPath's round robin visits cand, in the order and as often as it
//     visited every path, and the paths it no longer visits are those it
//     skipped without effect.
//   - open holds the same paths as the planes' cand together, by path
//     index: shares sums the usable paths' weights over it, in index
//     order as it did over every path (a spare path is not usable).
//   - rack holds the paths rackDetect (and reorderBase) visit: every path
//     that has its own cold state (use), and the unused ones whose rackAt
//     is still the initial 0. An unused path has nothing outstanding and
//     no timer, so rackDetect's only effect on it is rackAt 0 -> Never
//     (after which it leaves the set); a path with rackAt Never and nothing
//     outstanding is a path rackDetect leaves as it is. Only used paths
//     have an RTT (reorderBase).
//
// spareDirty says that setSpare must run again: a path may have changed
// whether it could take data (serviceable), the paths per plane changed,
// or the paths were allocated. A change of weight alone leaves it: the
// spare paths, and so pick's and open's sets, depend on nothing else.
type pathSel struct {
	pick       []portPick
	open       pathSet
	rack       pathSet
	spareDirty bool
}

// pathsChanged notes a change that moves the path shares and may move
// which paths are spare (see pathSel.spareDirty): every change of a path's
// state, suspect or portDown flag, of the paths per plane, or the paths'
// allocation.
func (s *sndState) pathsChanged() {
	s.sharesDirty = true
	s.sel.spareDirty = true
}
